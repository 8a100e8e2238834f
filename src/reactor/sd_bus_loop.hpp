// systemd's sd-bus on the runner's libuv loop (DESIGN.md "One reactor": no threads of our own,
// nothing on the loop blocks). An sd_bus connection is a socket and a deadline: a uv_poll_t
// watches the fd for what sd_bus_get_events asks (POLLIN, and POLLOUT while messages wait to be
// written), a uv_timer_t fires at sd_bus_get_timeout (a call's reply deadline, or at once when
// messages are already queued), and either runs sd_bus_process until it has nothing left. A
// uv_prepare_t re-reads both before every poll of the loop, so a message queued by any code (an
// async call, a match) is written without that code having to say so.
//
// Only asynchronous sd-bus calls belong on this connection (sd_bus_call_async,
// sd_bus_match_signal_async): sd_bus_call would block the loop until the reply.
#pragma once

#include <systemd/sd-bus.h>
#include <uv.h>

#include <functional>
#include <memory>
#include <string>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"

namespace motor::reactor {

class SdBusLoop {
 public:
  // The system bus (/run/dbus/system_bus_socket, or DBUS_SYSTEM_BUS_ADDRESS).
  static Expected<std::unique_ptr<SdBusLoop>> open_system(uv_loop_t* loop);
  // A bus at `address` (a D-Bus address such as unix:path=/run/x/bus), as a bus client.
  static Expected<std::unique_ptr<SdBusLoop>> open_address(uv_loop_t* loop, const std::string& address);
  // A direct connection to one peer at `address`, no bus daemon between (systemd's own
  // unix:path=/run/systemd/private, root only): no Hello, and its messages carry no sender.
  static Expected<std::unique_ptr<SdBusLoop>> open_peer(uv_loop_t* loop, const std::string& address);
  ~SdBusLoop();
  SdBusLoop(const SdBusLoop&) = delete;
  SdBusLoop& operator=(const SdBusLoop&) = delete;

  sd_bus* bus() const { return bus_; }
  // False once the connection broke (the daemon went away, a protocol error): nothing more
  // arrives; the broken callback ran once.
  bool connected() const { return connected_; }
  // Runs once, on the loop, when the connection breaks. Its callbacks (replies, signals) must
  // not destroy this object; the broken callback may not either.
  void on_broken(std::function<void(const std::string& why)> broken) { broken_ = std::move(broken); }
  // Re-reads what sd-bus waits for (the prepare handle does this before every poll; after a
  // message was queued outside a loop callback nothing else is needed either).
  void update();
  // How many times sd_bus_process ran (tests: the loop, not a blocking call, served the bus).
  uint64_t dispatches() const { return dispatches_; }

 private:
  static Expected<std::unique_ptr<SdBusLoop>> open_at(uv_loop_t* loop, const std::string& address, bool bus_client);
  SdBusLoop(uv_loop_t* loop, sd_bus* bus) : loop_(loop), bus_(bus) {}
  Status attach();
  void process();
  void fail(const std::string& why);

  uv_loop_t* loop_;
  sd_bus* bus_;
  bool connected_ = true;
  int polled_events_ = -1;  // the uv_poll mask now started (-1: none)
  uint64_t dispatches_ = 0;
  std::function<void(const std::string&)> broken_;
  UvHandle<uv_poll_t> poll_;
  UvHandle<uv_timer_t> timer_;
  UvHandle<uv_prepare_t> prepare_;
};

// An sd-bus error or a negative errno from sd-bus as an Error naming `what`.
Error sd_bus_failure(const std::string& what, int negative_errno, const sd_bus_error* error = nullptr);

}  // namespace motor::reactor
