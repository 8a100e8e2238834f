// libvirt's event loop on the runner's libuv loop (DESIGN.md: one loop, no threads of our own).
// libvirt asks its embedder for fd watches and timers through virEventRegisterImpl; this file
// implements them on uv_poll_t and uv_timer_t, so libvirt's sockets, keepalives and domain events
// are all served by the one uv_loop_t.
//
// libvirt's contract, honoured here:
//  - a watch/timer id is > 0 and never reused while libvirt may still name it;
//  - events 0 / frequency -1 disable without removing; frequency 0 fires on every iteration;
//  - remove returns at once, and the free callback (ff) for the opaque data runs later from a
//    clean stack (a libuv close callback): calling it inside remove deadlocks libvirt, which
//    holds its own locks while it removes.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>

#include "motor/expected.hpp"

namespace motor::reactor {

// Registers the implementation for this process (once; libvirt's registration is global and must
// precede every virConnectOpen). Fails if called again with another loop.
Status register_libvirt_loop(uv_loop_t* loop);

// What libvirt has registered right now (tests check nothing leaks after a connection closes).
struct LibvirtLoopCounts {
  size_t handles = 0;
  size_t timeouts = 0;
  size_t pending_frees = 0;  // removed, free callback not yet run
  uint64_t handle_dispatches = 0;   // callbacks run so far
  uint64_t timeout_dispatches = 0;
  // uv_poll_start/uv_timer_start/uv_idle_start refused (libvirt's update calls return nothing,
  // so a failure is counted here, where a test or a debugger finds it).
  uint64_t failed_starts = 0;
};
LibvirtLoopCounts libvirt_loop_counts();

}  // namespace motor::reactor
