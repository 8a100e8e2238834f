#include "reactor/libvirt_loop.hpp"

#include <libvirt/libvirt.h>

#include <cstdint>
#include <map>

namespace motor::reactor {
namespace {

struct Watch {
  uv_poll_t poll{};
  int id = 0;
  int fd = -1;
  virEventHandleCallback cb = nullptr;
  void* opaque = nullptr;
  virFreeCallback ff = nullptr;
};

// A libvirt timeout: a uv_timer_t for a period > 0, a uv_idle_t for "every iteration" (0): a
// zero-delay timer re-armed from its own callback would run again in the same pass.
struct Timeout {
  uv_timer_t timer{};
  uv_idle_t idle{};
  int id = 0;
  int open_handles = 2;
  virEventTimeoutCallback cb = nullptr;
  void* opaque = nullptr;
  virFreeCallback ff = nullptr;
};

uv_loop_t* g_loop = nullptr;
int g_next_id = 1;  // never reused: libvirt may still name a removed id in a late update
std::map<int, Watch*> g_watches;
std::map<int, Timeout*> g_timeouts;
size_t g_pending_frees = 0;
uint64_t g_failed_starts = 0;  // libvirt_loop_counts().failed_starts
struct {
  uint64_t handles = 0, timeouts = 0;
} g_dispatches;

int to_uv_events(int vir) {
  int ev = 0;
  if (vir & VIR_EVENT_HANDLE_READABLE) ev |= UV_READABLE;
  if (vir & VIR_EVENT_HANDLE_WRITABLE) ev |= UV_WRITABLE;
  return ev;
}

void on_poll(uv_poll_t* h, int status, int events) {
  auto* w = static_cast<Watch*>(h->data);
  if (!w) return;
  int vir = 0;
  if (status < 0) {
    vir = VIR_EVENT_HANDLE_ERROR;
  } else {
    if (events & UV_READABLE) vir |= VIR_EVENT_HANDLE_READABLE;
    if (events & UV_WRITABLE) vir |= VIR_EVENT_HANDLE_WRITABLE;
    if (events & UV_DISCONNECT) vir |= VIR_EVENT_HANDLE_HANGUP;
  }
  ++g_dispatches.handles;
  w->cb(w->id, w->fd, vir, w->opaque);
}

void set_watch_events(Watch* w, int vir_events) {
  const int ev = to_uv_events(vir_events);
  if (ev == 0) {
    uv_poll_stop(&w->poll);
  } else if (uv_poll_start(&w->poll, ev | UV_DISCONNECT, on_poll) != 0) {
    ++g_failed_starts;
  }
}

int add_handle(int fd, int events, virEventHandleCallback cb, void* opaque, virFreeCallback ff) {
  auto* w = new Watch;
  if (uv_poll_init(g_loop, &w->poll, fd) != 0) {
    delete w;
    return -1;
  }
  w->id = g_next_id++;
  w->fd = fd;
  w->cb = cb;
  w->opaque = opaque;
  w->ff = ff;
  w->poll.data = w;
  g_watches[w->id] = w;
  set_watch_events(w, events);
  return w->id;
}

void update_handle(int id, int events) {
  auto it = g_watches.find(id);
  if (it != g_watches.end()) set_watch_events(it->second, events);
}

int remove_handle(int id) {
  auto it = g_watches.find(id);
  if (it == g_watches.end()) return -1;
  Watch* w = it->second;
  g_watches.erase(it);
  uv_poll_stop(&w->poll);  // no dispatch from now on; the free callback runs once libuv has closed it
  ++g_pending_frees;
  uv_close(reinterpret_cast<uv_handle_t*>(&w->poll), [](uv_handle_t* h) {
    auto* dead = static_cast<Watch*>(h->data);
    --g_pending_frees;
    if (dead->ff) dead->ff(dead->opaque);
    delete dead;
  });
  return 0;
}

void on_timer_fire(Timeout* t) {
  ++g_dispatches.timeouts;
  t->cb(t->id, t->opaque);
}

void set_timeout_frequency(Timeout* t, int frequency_ms) {
  uv_timer_stop(&t->timer);
  uv_idle_stop(&t->idle);
  if (frequency_ms < 0) return;
  if (frequency_ms == 0) {
    if (uv_idle_start(&t->idle, [](uv_idle_t* h) {
          if (auto* t2 = static_cast<Timeout*>(h->data)) on_timer_fire(t2);
        }) != 0) {
      ++g_failed_starts;
    }
  } else {
    const auto period = static_cast<uint64_t>(frequency_ms);
    if (uv_timer_start(&t->timer, [](uv_timer_t* h) {
          if (auto* t2 = static_cast<Timeout*>(h->data)) on_timer_fire(t2);
        }, period, period) != 0) {
      ++g_failed_starts;
    }
  }
}

int add_timeout(int frequency_ms, virEventTimeoutCallback cb, void* opaque, virFreeCallback ff) {
  auto* t = new Timeout;
  if (uv_timer_init(g_loop, &t->timer) != 0) {
    delete t;
    return -1;
  }
  if (uv_idle_init(g_loop, &t->idle) != 0) {
    t->timer.data = t;
    uv_close(reinterpret_cast<uv_handle_t*>(&t->timer), [](uv_handle_t* h) { delete static_cast<Timeout*>(h->data); });
    return -1;
  }
  t->id = g_next_id++;
  t->cb = cb;
  t->opaque = opaque;
  t->ff = ff;
  t->timer.data = t;
  t->idle.data = t;
  g_timeouts[t->id] = t;
  set_timeout_frequency(t, frequency_ms);
  return t->id;
}

void update_timeout(int id, int frequency_ms) {
  auto it = g_timeouts.find(id);
  if (it != g_timeouts.end()) set_timeout_frequency(it->second, frequency_ms);
}

int remove_timeout(int id) {
  auto it = g_timeouts.find(id);
  if (it == g_timeouts.end()) return -1;
  Timeout* t = it->second;
  g_timeouts.erase(it);
  set_timeout_frequency(t, -1);
  ++g_pending_frees;
  auto closed = [](uv_handle_t* h) {
    auto* dead = static_cast<Timeout*>(h->data);
    if (--dead->open_handles > 0) return;
    --g_pending_frees;
    if (dead->ff) dead->ff(dead->opaque);
    delete dead;
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&t->timer), closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&t->idle), closed);
  return 0;
}

}  // namespace

Status register_libvirt_loop(uv_loop_t* loop) {
  if (g_loop == loop) return {};
  if (g_loop != nullptr) return make_error("libvirt", "libvirt's event loop is already registered on another loop");
  g_loop = loop;
  virEventRegisterImpl(add_handle, update_handle, remove_handle, add_timeout, update_timeout, remove_timeout);
  return {};
}

LibvirtLoopCounts libvirt_loop_counts() {
  return LibvirtLoopCounts{g_watches.size(), g_timeouts.size(), g_pending_frees, g_dispatches.handles, g_dispatches.timeouts,
                           g_failed_starts};
}

}  // namespace motor::reactor
