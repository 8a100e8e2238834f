// libvirt's event loop on libuv (src/reactor/libvirt_loop): against libvirt's test:///default
// driver (no daemon) and one real qemu:///system connection through libvirtd.
#include "reactor/libvirt_loop.hpp"

#include <gtest/gtest.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <sys/stat.h>
#include <uv.h>

#include <cstdio>
#include <functional>

#include "support/runner_harness.hpp"

namespace {

uv_loop_t* loop() {
  static uv_loop_t* l = [] {
    auto* lp = uv_default_loop();
    EXPECT_TRUE(motor::reactor::register_libvirt_loop(lp).ok());
    virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});  // errors are read from return values
    return lp;
  }();
  return l;
}

// Runs the loop until `done` holds or `ms` pass.
bool run_until(const std::function<bool()>& done, uint64_t ms) {
  const uint64_t deadline = uv_hrtime() + ms * 1000000;
  uv_timer_t tick;
  uv_timer_init(loop(), &tick);
  uv_timer_start(&tick, [](uv_timer_t*) {}, 5, 5);  // wakes the loop to re-check `done`
  while (!done() && uv_hrtime() < deadline) uv_run(loop(), UV_RUN_ONCE);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
  uv_run(loop(), UV_RUN_NOWAIT);
  return done();
}

struct Events {
  int lifecycle = 0;
  int last_event = -1;
  bool freed = false;
};

int on_lifecycle(virConnectPtr, virDomainPtr, int event, int, void* opaque) {
  auto* e = static_cast<Events*>(opaque);
  ++e->lifecycle;
  e->last_event = event;
  return 0;
}

// Deregisters and closes; the free callback runs later from the loop, and nothing stays registered.
void close_and_expect_nothing_left(virConnectPtr conn, int cb_id, Events& events,
                                   const motor::reactor::LibvirtLoopCounts& before) {
  ASSERT_EQ(virConnectDomainEventDeregisterAny(conn, cb_id), 0);
  virConnectClose(conn);
  ASSERT_TRUE(run_until([&] { return events.freed; }, 2000));
  ASSERT_TRUE(run_until([&] { return motor::reactor::libvirt_loop_counts().pending_frees == 0; }, 2000));
  const auto after = motor::reactor::libvirt_loop_counts();
  EXPECT_EQ(after.handles, before.handles);
  EXPECT_EQ(after.timeouts, before.timeouts);
}

TEST(LibvirtLoop, TestDriverDeliversDomainEventsThroughLibuvAndFreesLater) {
  loop();
  const auto before = motor::reactor::libvirt_loop_counts();
  virConnectPtr conn = virConnectOpen("test:///default");
  ASSERT_NE(conn, nullptr);
  Events events;
  const int cb_id = virConnectDomainEventRegisterAny(conn, nullptr, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                                     VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), &events,
                                                     [](void* opaque) { static_cast<Events*>(opaque)->freed = true; });
  ASSERT_GE(cb_id, 0);
  virDomainPtr dom = virDomainLookupByName(conn, "test");
  ASSERT_NE(dom, nullptr);
  ASSERT_EQ(virDomainDestroy(dom), 0);
  // The event is queued by the driver and dispatched from a libvirt timeout: only our loop runs it.
  EXPECT_EQ(events.lifecycle, 0);
  ASSERT_TRUE(run_until([&] { return events.lifecycle > 0; }, 2000));
  EXPECT_EQ(events.last_event, VIR_DOMAIN_EVENT_STOPPED);
  EXPECT_GT(motor::reactor::libvirt_loop_counts().timeout_dispatches, before.timeout_dispatches);

  virDomainFree(dom);
  // The free callback is libvirt's to run from a clean stack: at the latest once the loop ran.
  close_and_expect_nothing_left(conn, cb_id, events, before);
}

TEST(LibvirtLoop, RegisteringAnotherLoopIsRefused) {
  loop();
  uv_loop_t other;
  uv_loop_init(&other);
  EXPECT_FALSE(motor::reactor::register_libvirt_loop(&other).ok());
  EXPECT_TRUE(motor::reactor::register_libvirt_loop(loop()).ok());
  uv_loop_close(&other);
}

TEST(LibvirtLoop, QemuSystemConnectionKeepsAliveOnTheLoop) {
  struct stat st{};
  MOTOR_REQUIRE(stat("/run/libvirt/libvirt-sock", &st) == 0, "libvirtd is not running (scripts/setup starts it)");
  loop();
  const auto before = motor::reactor::libvirt_loop_counts();
  uint64_t t0 = uv_hrtime();
  virConnectPtr conn = virConnectOpen("qemu:///system");
  const uint64_t open_us = (uv_hrtime() - t0) / 1000;
  ASSERT_NE(conn, nullptr) << virGetLastErrorMessage();
  // The remote driver's socket is now a watch on our loop.
  EXPECT_GT(motor::reactor::libvirt_loop_counts().handles, before.handles);
  // Keepalive every second, dead after 3 missed answers: libvirt drives it with a timeout of ours.
  ASSERT_EQ(virConnectSetKeepAlive(conn, 1, 3), 0);
  Events events;
  const int cb_id = virConnectDomainEventRegisterAny(conn, nullptr, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                                     VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), &events,
                                                     [](void* opaque) { static_cast<Events*>(opaque)->freed = true; });
  ASSERT_GE(cb_id, 0);
  const auto mid = motor::reactor::libvirt_loop_counts();
  run_until([] { return false; }, 2500);
  const auto later = motor::reactor::libvirt_loop_counts();
  EXPECT_GT(later.timeout_dispatches, mid.timeout_dispatches) << "the keepalive timer never fired";
  EXPECT_GT(later.handle_dispatches, mid.handle_dispatches) << "no keepalive answer was read through the loop";
  EXPECT_EQ(virConnectIsAlive(conn), 1);

  t0 = uv_hrtime();
  char* caps = virConnectGetHostname(conn);
  const uint64_t call_us = (uv_hrtime() - t0) / 1000;
  free(caps);
  std::printf("[ libvirt ] virConnectOpen(qemu:///system) %llu us, one RPC (GetHostname) %llu us\n",
              static_cast<unsigned long long>(open_us), static_cast<unsigned long long>(call_us));
  close_and_expect_nothing_left(conn, cb_id, events, before);
}

}  // namespace
