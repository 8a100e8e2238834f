// The runner's guest-agent connection: a non-blocking libuv stream to the Unix socket QEMU binds
// for the virtio-serial channel. One request in flight at a time (the agent answers in order);
// every byte from the guest goes through QgaFramer (bounded) before anything is decoded, and
// every request has a reply deadline.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "motor/expected.hpp"
#include "reactor/uv_handle.hpp"
#include "vm/qga_protocol.hpp"

namespace motor::vm {

class QgaClient {
 public:
  using Reply = std::function<void(Expected<std::string>)>;  // one whole message, or why not
  QgaClient(uv_loop_t* loop, size_t max_message) : loop_(loop), framer_(max_message) {}
  ~QgaClient();
  QgaClient(const QgaClient&) = delete;
  QgaClient& operator=(const QgaClient&) = delete;

  // Connects; `done` gets an error if the socket cannot be reached.
  void connect(const std::string& socket_path, std::function<void(Status)> done);
  // Sends one request line; `reply` runs once with its reply or an error (deadline, closed
  // stream, protocol violation). After any error the client is broken: every later request fails.
  void request(std::string line, uint64_t timeout_ms, Reply reply);
  // guest-sync-delimited with a fresh id, waiting up to timeout_ms (the guest may still be booting:
  // the request waits in the channel until the agent reads it).
  void sync(uint64_t timeout_ms, std::function<void(Status)> done);
  bool broken() const { return broken_; }
  uint64_t bytes_received() const { return bytes_received_; }

 private:
  void fail(const Error& e);
  void on_read(ssize_t n, const uv_buf_t* buf);

  uv_loop_t* loop_;
  QgaFramer framer_;
  reactor::UvHandle<uv_pipe_t> pipe_;
  reactor::UvHandle<uv_timer_t> timer_;
  uv_connect_t connect_req_{};
  std::function<void(Status)> connect_done_;
  Reply pending_;
  bool broken_ = false;
  int64_t next_sync_id_ = 0;
  uint64_t bytes_received_ = 0;
  std::vector<std::string> messages_;
  std::unique_ptr<char[]> buf_ = std::make_unique<char[]>(kReadChunk);
  static constexpr size_t kReadChunk = 64 * 1024;
  struct Write {
    uv_write_t req;
    std::string data;
  };
};

}  // namespace motor::vm
