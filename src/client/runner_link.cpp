#include "client/runner_link.hpp"

#include <sys/socket.h>

namespace motor::client {

Expected<Connection*> RunnerLink::open() {
  {
    std::lock_guard lock(mu_);
    if (cut_) return Error{"unreachable", "the endpoint is stopping"};
    conn_.reset();
  }
  auto c = Connection::open(endpoint_, ssh_command_ ? ssh_command_->c_str() : nullptr);
  if (!c) return c.error();
  std::lock_guard lock(mu_);
  if (cut_) return Error{"unreachable", "the endpoint is stopping"};
  conn_.emplace(std::move(*c));
  return &*conn_;
}

void RunnerLink::cut() {
  std::lock_guard lock(mu_);
  cut_ = true;
  // The fd stays open (the serving thread owns it) but every read and write on it ends now.
  if (conn_) ::shutdown(conn_->fd(), SHUT_RDWR);
}

bool RunnerLink::is_cut() const {
  std::lock_guard lock(mu_);
  return cut_;
}

}  // namespace motor::client
