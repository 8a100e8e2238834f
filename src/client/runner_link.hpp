// One caller request's connection to the runner, in `motor exec-remote`: opened by the thread
// that serves the request, cut by another (the caller went away, the endpoint stops).
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "client/connection.hpp"
#include "client/ssh_target.hpp"

namespace motor::client {

class RunnerLink {
 public:
  RunnerLink(Endpoint endpoint, std::optional<std::string> ssh_command)
      : endpoint_(std::move(endpoint)), ssh_command_(std::move(ssh_command)) {}
  // A new connection (the old one, if any, closed); an error when it cannot be made or the link
  // was cut. The pointer stays valid until the next open().
  Expected<Connection*> open();
  // Ends every wait on the connection, now and later (from any thread).
  void cut();
  bool is_cut() const;

 private:
  Endpoint endpoint_;
  std::optional<std::string> ssh_command_;
  mutable std::mutex mu_;
  std::optional<Connection> conn_;
  bool cut_ = false;
};

}  // namespace motor::client
