// Ownership of libuv handles: the owner holds a UvHandle<T>; destroying it closes the handle and
// the memory is freed in the close callback, after libuv is done with it. The handle's data
// pointer is cleared first, so no callback reaches an owner that is gone.
#pragma once

#include <uv.h>

#include <string>

#include "motor/expected.hpp"

namespace motor::reactor {

// A libuv return code as a Status: `what` and uv_strerror on failure.
inline Status uv_status(int rc, const std::string& what) {
  if (rc >= 0) return {};
  return make_error("io", what + ": " + uv_strerror(rc));
}

template <typename T>
class UvHandle {
 public:
  UvHandle() = default;
  UvHandle(const UvHandle&) = delete;
  UvHandle& operator=(const UvHandle&) = delete;
  ~UvHandle() { close(); }

  // The handle, allocated on first use: after close() the next use takes a fresh one, so an
  // owner can init it again (a timer armed, closed and armed again; a null handle crashed
  // uv_timer_init when a systemd unit's removal came before its entry's exit).
  T* get() const {
    if (!h_) h_ = new T{};
    return h_;
  }
  T* operator->() const { return get(); }
  uv_handle_t* handle() const { return reinterpret_cast<uv_handle_t*>(get()); }
  uv_stream_t* stream() const { return reinterpret_cast<uv_stream_t*>(get()); }

  // Call after a successful uv_*_init: from then on the handle must be closed through libuv.
  void initialized(void* owner) {
    get()->data = owner;
    live_ = true;
  }
  bool live() const { return h_ && live_; }

  // Calls uv_<type>_init(loop, handle, args...) (or uv_poll_init and the like, whose second
  // parameter is the handle) and, when it succeeds, marks the handle live for `owner`. Returns
  // the libuv code: a failed init leaves nothing to close.
  template <typename Init, typename... Args>
  int init(void* owner, Init init_fn, uv_loop_t* loop, Args... args) {
    const int rc = init_fn(loop, get(), args...);
    if (rc == 0) initialized(owner);
    return rc;
  }

  void close() {
    if (!h_) return;
    if (live_) {
      h_->data = nullptr;
      if (!uv_is_closing(handle())) {
        uv_close(handle(), [](uv_handle_t* h) { delete reinterpret_cast<T*>(h); });
      }
    } else {
      delete h_;
    }
    h_ = nullptr;
    live_ = false;
  }

 private:
  mutable T* h_ = nullptr;
  bool live_ = false;
};

template <typename Owner, typename T>
Owner* owner_of(T* handle) {
  return static_cast<Owner*>(handle->data);
}

}  // namespace motor::reactor
