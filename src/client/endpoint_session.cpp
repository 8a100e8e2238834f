#include "client/endpoint_session.hpp"

#include <poll.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "client/caller_frames.hpp"
#include "client/endpoint_requests.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

namespace motor::client {
namespace {

struct InFlight {
  explicit InFlight(const EndpointConfig& config) : link(config.runner, config.ssh_command) {}
  RunnerLink link;
  std::thread thread;
  std::atomic<bool> done{false};
};

class CallerSession {
 public:
  CallerSession(int out_fd, const EndpointConfig& config) : out_(out_fd), config_(config) {}
  // What is in flight finishes; once the caller cannot be written to, it is cut short.
  ~CallerSession() {
    for (;;) {
      if (out_.gone()) cut_all();
      if (std::all_of(in_flight_.begin(), in_flight_.end(), [](const auto& f) { return f->done.load(); })) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (auto& f : in_flight_) f->thread.join();
  }

  void cut_all() {
    for (auto& f : in_flight_) f->link.cut();
  }
  bool caller_gone() const { return out_.gone(); }

  // One frame from the caller: a request served on its own thread, or a bad_request answered here.
  void take(const std::string& frame) {
    std::optional<int64_t> id;
    auto request = protocol::parse_request(parser_, frame, &id);
    if (!request) {
      out_.send(protocol::encode_error(id, request.error().code, request.error().message));
      return;
    }
    in_flight_.remove_if([](const auto& f) {
      if (!f->done) return false;
      f->thread.join();
      return true;
    });
    auto& f = in_flight_.emplace_back(std::make_unique<InFlight>(config_));
    f->thread = std::thread([this, flight = f.get(), r = std::move(*request)] {
      serve_request(out_, flight->link, r);
      flight->done = true;
    });
  }

  void broken_frames(const Error& e) { out_.send(protocol::encode_error(std::nullopt, e.code, e.message)); }

 private:
  CallerOutput out_;
  const EndpointConfig& config_;
  simdjson::dom::parser parser_;
  std::list<std::unique_ptr<InFlight>> in_flight_;
};

}  // namespace

void serve_caller(int in_fd, int out_fd, const EndpointConfig& config, int stop_fd) {
  CallerSession session(out_fd, config);
  protocol::FrameDecoder decoder;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    pollfd fds[2] = {{in_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(fds, stop_fd >= 0 ? 2 : 1, 1000) < 0 && errno != EINTR) break;
    if (stop_fd >= 0 && (fds[1].revents & POLLIN)) {
      session.cut_all();
      break;
    }
    if (session.caller_gone()) break;
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t n = ::read(in_fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the caller sends no more: what is in flight finishes
    std::vector<std::string> frames;
    auto st = decoder.feed(std::string_view(buf.data(), static_cast<size_t>(n)), frames);
    for (const auto& f : frames) session.take(f);
    if (!st) {
      // As the runner does: a broken frame ends what the caller may send.
      session.broken_frames(st.error());
      break;
    }
  }
}

}  // namespace motor::client
