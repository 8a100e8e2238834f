#include "sandbox/netns_pool.hpp"

#include <fcntl.h>
#include <sched.h>

#include <cerrno>

#include "motor/sys_error.hpp"
#include "sandbox/loopback.hpp"

namespace motor::sandbox {

Status NetnsPool::open_home() {
  home_ = UniqueFd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!home_) return sys_error("netns pool: opening /proc/thread-self/ns/net");
  return {};
}

Status NetnsPool::add_one(bool& stranded) {
  stranded = false;
  if (!home_) return make_error("internal", "netns pool: open_home() was not called");
  if (unshare(CLONE_NEWNET) != 0) return sys_error("netns pool: unshare(CLONE_NEWNET)");
  const char* stage = "";
  const int up_err = bring_up_loopback(stage);
  UniqueFd ns(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  const int open_err = errno;
  if (setns(home_.get(), CLONE_NEWNET) != 0) {
    stranded = true;
    return sys_error("netns pool: setns back to the home network namespace");
  }
  if (up_err != 0) return make_error("io", std::string("netns pool: ") + stage + ": " + std::strerror(up_err));
  if (!ns) return make_error("io", std::string("netns pool: opening the new namespace: ") + std::strerror(open_err));
  pool_.push_back(std::move(ns));
  return {};
}

UniqueFd NetnsPool::take() {
  if (pool_.empty()) return UniqueFd();
  UniqueFd fd = std::move(pool_.front());
  pool_.pop_front();
  return fd;
}

}  // namespace motor::sandbox
