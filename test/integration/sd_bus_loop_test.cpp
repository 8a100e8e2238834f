// sd-bus on libuv (src/reactor/sd_bus_loop): against a private dbus-daemon this test starts and
// stops. Every answer must come through the loop: the connection is never called blocking.
#include "reactor/sd_bus_loop.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <cstring>
#include <functional>
#include <string>

#include "support/runner_harness.hpp"

namespace {

using motor::reactor::SdBusLoop;

// Runs `loop` until `done` holds or `ms` pass.
bool run_until(uv_loop_t* loop, const std::function<bool()>& done, uint64_t ms) {
  const uint64_t deadline = uv_hrtime() + ms * 1000000;
  uv_timer_t tick;
  uv_timer_init(loop, &tick);
  uv_timer_start(&tick, [](uv_timer_t*) {}, 5, 5);  // wakes the loop to re-check `done`
  while (!done() && uv_hrtime() < deadline) uv_run(loop, UV_RUN_ONCE);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
  uv_run(loop, UV_RUN_NOWAIT);
  return done();
}

// Does a Unix stream socket at `path` accept a connection now?
bool accepts_connections(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

class SdBusLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(access("/usr/bin/dbus-daemon", X_OK) == 0, "dbus-daemon is missing (scripts/setup installs dbus)");
    dir_ = motor::test::make_temp_dir();
    const std::string socket = dir_ + "/bus";
    address_ = "unix:path=" + socket;
    daemon_ = fork();
    ASSERT_GE(daemon_, 0);
    if (daemon_ == 0) {
      const int null = open("/dev/null", O_WRONLY);  // its complaint that root may not raise RLIMIT_NOFILE here
      if (null >= 0) dup2(null, STDERR_FILENO);
      execl("/usr/bin/dbus-daemon", "dbus-daemon", "--session", "--nofork", "--nopidfile", "--nosyslog",
            ("--address=" + address_).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // The socket file appears when dbus-daemon binds it, a moment before it listens: wait until a
    // connection is accepted (a peer connecting in that moment was refused, once, in CI).
    bool listening = false;
    for (int i = 0; i < 500 && !(listening = accepts_connections(socket)); ++i) usleep(10000);
    ASSERT_TRUE(listening) << "dbus-daemon did not listen on " << socket;
    ASSERT_EQ(uv_loop_init(&loop_), 0);
    loop_ready_ = true;
  }
  void TearDown() override {
    conn_.reset();
    if (loop_ready_) {
      uv_run(&loop_, UV_RUN_NOWAIT);  // close callbacks
      EXPECT_EQ(uv_loop_close(&loop_), 0) << "a handle of the bus connection was left open";
    }
    stop_daemon();
    if (!dir_.empty()) motor::test::remove_tree(dir_);
  }
  void stop_daemon() {
    if (daemon_ <= 0) return;
    kill(daemon_, SIGTERM);
    waitpid(daemon_, nullptr, 0);
    daemon_ = -1;
  }
  void connect() {
    auto c = SdBusLoop::open_address(&loop_, address_);
    ASSERT_TRUE(c) << c.error().message;
    conn_ = std::move(*c);
  }

  std::string dir_, address_;
  pid_t daemon_ = -1;
  uv_loop_t loop_{};
  bool loop_ready_ = false;
  std::unique_ptr<SdBusLoop> conn_;
};

struct Reply {
  bool arrived = false;
  int error = 0;
  std::string text;
};

int on_reply(sd_bus_message* m, void* userdata, sd_bus_error*) {
  auto* r = static_cast<Reply*>(userdata);
  r->arrived = true;
  r->error = sd_bus_message_get_errno(m);
  const char* s = nullptr;
  if (r->error == 0 && sd_bus_message_read(m, "s", &s) >= 0 && s) r->text = s;
  return 0;
}

TEST_F(SdBusLoopTest, AnAsyncCallIsAnsweredFromTheLoop) {
  connect();
  Reply reply;
  sd_bus_slot* slot = nullptr;
  ASSERT_GE(sd_bus_call_method_async(conn_->bus(), &slot, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                     "org.freedesktop.DBus", "GetId", on_reply, &reply, ""),
            0);
  const uint64_t before = conn_->dispatches();
  ASSERT_TRUE(run_until(&loop_, [&] { return reply.arrived; }, 5000)) << "no reply through the loop";
  EXPECT_EQ(reply.error, 0);
  EXPECT_EQ(reply.text.size(), 32u) << reply.text;  // the bus id: 32 hex digits
  EXPECT_GT(conn_->dispatches(), before);
  sd_bus_slot_unref(slot);
}

TEST_F(SdBusLoopTest, ASignalIsDeliveredFromTheLoop) {
  connect();
  int seen = 0;
  auto on_signal = [](sd_bus_message*, void* userdata, sd_bus_error*) -> int {
    ++*static_cast<int*>(userdata);
    return 0;
  };
  sd_bus_slot* match = nullptr;
  ASSERT_GE(sd_bus_match_signal_async(conn_->bus(), &match, nullptr, "/org/motor/Test", "org.motor.Test", "Ping",
                                      on_signal, nullptr, &seen),
            0);
  // The match is installed once the daemon answered AddMatch (on the loop); then a peer signals.
  ASSERT_TRUE(run_until(&loop_, [&] { return conn_->dispatches() > 2; }, 2000));
  sd_bus* peer = nullptr;
  ASSERT_GE(sd_bus_new(&peer), 0);
  ASSERT_GE(sd_bus_set_address(peer, address_.c_str()), 0);
  ASSERT_GE(sd_bus_set_bus_client(peer, 1), 0);
  ASSERT_GE(sd_bus_start(peer), 0);
  bool delivered = false;
  for (int attempt = 0; attempt < 50 && !delivered; ++attempt) {  // until the AddMatch has landed
    ASSERT_GE(sd_bus_emit_signal(peer, "/org/motor/Test", "org.motor.Test", "Ping", ""), 0);
    ASSERT_GE(sd_bus_flush(peer), 0);
    delivered = run_until(&loop_, [&] { return seen > 0; }, 100);
  }
  EXPECT_TRUE(delivered) << "the signal never reached the loop's connection";
  sd_bus_flush_close_unref(peer);
  sd_bus_slot_unref(match);
}

TEST_F(SdBusLoopTest, AnUnansweredCallTimesOutOnTheLoopsTimer) {
  connect();
  // A peer owns a name and never reads: only the loop's timer can end the call.
  sd_bus* silent = nullptr;
  ASSERT_GE(sd_bus_new(&silent), 0);
  ASSERT_GE(sd_bus_set_address(silent, address_.c_str()), 0);
  ASSERT_GE(sd_bus_set_bus_client(silent, 1), 0);
  ASSERT_GE(sd_bus_start(silent), 0);
  ASSERT_GE(sd_bus_request_name(silent, "org.motor.Silent", 0), 0);
  sd_bus_message* call = nullptr;
  ASSERT_GE(sd_bus_message_new_method_call(conn_->bus(), &call, "org.motor.Silent", "/", "org.motor.Silent", "Hang"), 0);
  Reply reply;
  sd_bus_slot* slot = nullptr;
  ASSERT_GE(sd_bus_call_async(conn_->bus(), &slot, call, on_reply, &reply, 200 * 1000), 0);
  sd_bus_message_unref(call);
  const uint64_t started = uv_hrtime();
  ASSERT_TRUE(run_until(&loop_, [&] { return reply.arrived; }, 5000)) << "the call's deadline never fired";
  EXPECT_EQ(reply.error, ETIMEDOUT);
  EXPECT_GE(uv_hrtime() - started, 150u * 1000000);  // not before its deadline
  sd_bus_slot_unref(slot);
  sd_bus_flush_close_unref(silent);
}

TEST_F(SdBusLoopTest, ADaemonThatGoesAwayIsReportedOnce) {
  connect();
  int broken = 0;
  conn_->on_broken([&](const std::string&) { ++broken; });
  ASSERT_TRUE(run_until(&loop_, [&] { return conn_->dispatches() > 1; }, 2000));  // Hello answered
  stop_daemon();
  ASSERT_TRUE(run_until(&loop_, [&] { return !conn_->connected(); }, 5000)) << "the broken connection was not seen";
  EXPECT_EQ(broken, 1);
}

}  // namespace
