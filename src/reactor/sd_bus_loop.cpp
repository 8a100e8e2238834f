#include "reactor/sd_bus_loop.hpp"

#include <poll.h>
#include <time.h>

#include <cstring>

#include <fmt/format.h>

namespace motor::reactor {
namespace {

// sd_bus_process calls per wake-up before the loop serves others again (the timer, at 0, goes on).
constexpr int kProcessBatch = 64;

uint64_t monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

int uv_events(int poll_events) {
  return ((poll_events & POLLIN) ? UV_READABLE : 0) | ((poll_events & POLLOUT) ? UV_WRITABLE : 0) | UV_DISCONNECT;
}

Expected<std::unique_ptr<SdBusLoop>> attached(std::unique_ptr<SdBusLoop> conn, Status s) {
  if (!s) return s.error();
  return conn;
}

}  // namespace

Error sd_bus_failure(const std::string& what, int negative_errno, const sd_bus_error* error) {
  if (error && sd_bus_error_is_set(error)) {
    return make_error("io", fmt::format("{}: {} ({})", what, error->message ? error->message : "", error->name));
  }
  return make_error("io", fmt::format("{}: {}", what, std::strerror(-negative_errno)));
}

Expected<std::unique_ptr<SdBusLoop>> SdBusLoop::open_system(uv_loop_t* loop) {
  sd_bus* bus = nullptr;
  if (int r = sd_bus_open_system(&bus); r < 0) return sd_bus_failure("connecting to the system bus", r);
  std::unique_ptr<SdBusLoop> conn(new SdBusLoop(loop, bus));
  Status s = conn->attach();
  return attached(std::move(conn), std::move(s));
}

Expected<std::unique_ptr<SdBusLoop>> SdBusLoop::open_address(uv_loop_t* loop, const std::string& address) {
  return open_at(loop, address, true);
}

Expected<std::unique_ptr<SdBusLoop>> SdBusLoop::open_peer(uv_loop_t* loop, const std::string& address) {
  return open_at(loop, address, false);
}

Expected<std::unique_ptr<SdBusLoop>> SdBusLoop::open_at(uv_loop_t* loop, const std::string& address, bool bus_client) {
  sd_bus* bus = nullptr;
  if (int r = sd_bus_new(&bus); r < 0) return sd_bus_failure("sd_bus_new", r);
  std::unique_ptr<SdBusLoop> conn(new SdBusLoop(loop, bus));
  if (int r = sd_bus_set_address(bus, address.c_str()); r < 0) return sd_bus_failure("the bus address " + address, r);
  if (int r = sd_bus_set_bus_client(bus, bus_client); r < 0) return sd_bus_failure("sd_bus_set_bus_client", r);
  // Connecting a local socket does not wait; the Hello exchange is asynchronous (answered on the loop).
  if (int r = sd_bus_start(bus); r < 0) return sd_bus_failure("connecting to " + address, r);
  Status s = conn->attach();
  return attached(std::move(conn), std::move(s));
}

SdBusLoop::~SdBusLoop() {
  prepare_.close();
  timer_.close();
  poll_.close();  // before the fd goes with the connection
  // Not sd_bus_flush: it would block on what is still unwritten. What is lost is lost with us.
  sd_bus_close(bus_);
  sd_bus_unref(bus_);
}

Status SdBusLoop::attach() {
  const int fd = sd_bus_get_fd(bus_);
  if (fd < 0) return sd_bus_failure("the bus connection's fd", fd);
  if (auto s = uv_status(poll_.init(this, uv_poll_init, loop_, fd), "watching the bus connection"); !s) return s;
  if (auto s = uv_status(timer_.init(this, uv_timer_init, loop_), "the bus connection's timer"); !s) return s;
  uv_unref(timer_.handle());  // the poll keeps the loop alive; the timer only serves it
  if (auto s = uv_status(prepare_.init(this, uv_prepare_init, loop_), "the bus connection's prepare handle"); !s) return s;
  const int rc = uv_prepare_start(prepare_.get(), [](uv_prepare_t* h) {
    if (auto* self = owner_of<SdBusLoop>(h)) self->update();
  });
  if (auto s = uv_status(rc, "starting the bus connection's prepare handle"); !s) return s;
  uv_unref(prepare_.handle());
  update();
  return connected_ ? Status{} : make_error("io", "the bus connection broke at once");
}

void SdBusLoop::update() {
  if (!connected_) return;
  const int events = sd_bus_get_events(bus_);
  if (events < 0) return fail(sd_bus_failure("sd_bus_get_events", events).message);
  if (events != polled_events_) {
    const int rc = uv_poll_start(poll_.get(), uv_events(events), [](uv_poll_t* h, int status, int) {
      auto* self = owner_of<SdBusLoop>(h);
      if (!self) return;
      if (status < 0) return self->fail(std::string("polling the bus connection: ") + uv_strerror(status));
      self->process();
    });
    if (rc < 0) return fail(std::string("polling the bus connection: ") + uv_strerror(rc));
    polled_events_ = events;
  }
  uint64_t deadline_us = UINT64_MAX;
  if (int r = sd_bus_get_timeout(bus_, &deadline_us); r < 0) return fail(sd_bus_failure("sd_bus_get_timeout", r).message);
  if (deadline_us == UINT64_MAX) {
    uv_timer_stop(timer_.get());
    return;
  }
  const uint64_t now_us = monotonic_us();
  const uint64_t delay_ms = deadline_us <= now_us ? 0 : (deadline_us - now_us + 999) / 1000;
  const int rc = uv_timer_start(timer_.get(), [](uv_timer_t* h) {
    if (auto* self = owner_of<SdBusLoop>(h)) self->process();
  }, delay_ms, 0);
  if (rc < 0) fail(std::string("the bus connection's timer: ") + uv_strerror(rc));
}

void SdBusLoop::process() {
  if (!connected_) return;
  for (int i = 0; i < kProcessBatch; ++i) {
    ++dispatches_;
    const int r = sd_bus_process(bus_, nullptr);
    if (r < 0) return fail(sd_bus_failure("the bus connection", r).message);
    if (!connected_) return;
    if (r == 0) break;  // nothing more for now
  }
  update();  // a full batch leaves the timer at 0: the rest comes next iteration
}

void SdBusLoop::fail(const std::string& why) {
  if (!connected_) return;
  connected_ = false;
  poll_.close();
  timer_.close();
  prepare_.close();
  if (auto broken = std::move(broken_)) broken(why);
}

}  // namespace motor::reactor
