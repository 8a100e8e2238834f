// Fresh network namespaces made ahead of demand. Creating a network namespace is the dearest
// part of a job's clone3 (about a millisecond here, more under load); the job starter makes a
// few while it is idle and each job enters one with setns instead of CLONE_NEWNET.
//
// Each namespace is created by unshare(CLONE_NEWNET) in the calling (single-threaded) process,
// gets `lo` up, is held by one fd only, and the caller goes straight back to its own namespace.
// Nothing else ever enters it before its job: take() hands it out once and forgets it, so no
// two jobs share one. Nothing is bind-mounted or named: when the holding process dies (the
// runner's death kills the job starter), the kernel frees every pooled namespace.
#pragma once

#include <cstddef>
#include <deque>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::sandbox {

class NetnsPool {
 public:
  explicit NetnsPool(size_t target) : target_(target) {}
  // Records the caller's own network namespace (where every create returns to).
  Status open_home();
  bool full() const { return pool_.size() >= target_; }
  size_t size() const { return pool_.size(); }
  // Makes one more namespace. An error after leaving home and failing to get back is fatal
  // for the caller (`stranded` set): it must not go on in a foreign namespace.
  Status add_one(bool& stranded);
  // A never-used namespace, or an empty fd when the pool is empty (the job then gets
  // CLONE_NEWNET: the same isolation, only slower).
  UniqueFd take();

 private:
  size_t target_;
  UniqueFd home_;
  std::deque<UniqueFd> pool_;
};

}  // namespace motor::sandbox
