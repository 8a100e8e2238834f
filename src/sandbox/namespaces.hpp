// The job's namespaces: which ones clone3 creates, and a child-side check that they really are
// new before anything touches mounts, the hostname or the network (a child that ran in the
// runner's namespaces would otherwise change the host's).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "motor/expected.hpp"

namespace motor::sandbox {

// CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP.
uint64_t job_namespace_flags();

struct NamespaceIdentity {
  std::string path;  // "/proc/self/ns/mnt"
  std::string stage; // "mount namespace is not new"
  dev_t dev = 0;
  ino_t ino = 0;
};

struct NamespacePlan {
  uint64_t clone_flags = 0;
  std::vector<NamespaceIdentity> parent;  // the runner's own namespaces, recorded at plan time
  // A fresh network namespace prepared ahead (netns_pool.hpp), entered with setns instead of
  // CLONE_NEWNET; -1: clone3 creates one. Owned by the caller, inherited by the child only.
  int prepared_net_fd = -1;
};

// own_user_namespace: CLONE_NEWUSER too, so the user namespace owns the others (user_namespace.hpp).
Expected<NamespacePlan> plan_namespaces(bool own_user_namespace = false);

// Makes the job enter `net_fd` (a never-used namespace from the pool) instead of creating one;
// a plan without CLONE_NEWNET (a test build's weakened "network-namespace") is left as it is.
void use_prepared_network_namespace(NamespacePlan& plan, int net_fd);

// Child, first thing: enters the prepared network namespace if there is one; then checks that
// every namespace differs from the parent's. Then, once attached to the
// job's cgroup, a fresh cgroup namespace rooted there (on cgroup v1 the attach happens after
// clone, so the clone-time cgroup namespace would be rooted at the runner's cgroup).
int enter_namespaces(const NamespacePlan& plan, const char*& stage);

}  // namespace motor::sandbox
