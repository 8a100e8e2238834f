// The job's own user namespace (SandboxConfig::own_user_namespace), for a sandbox built by a
// process that holds no capabilities: motor-unit-entry in a unit whose CapabilityBoundingSet is
// empty (job_backend = systemd). clone3 adds CLONE_NEWUSER to the other namespaces, which the new
// user namespace then owns; the child maps only the ids it already has (uid_map "U U 1",
// setgroups "deny", gid_map "G G 1", the one mapping an unprivileged process may write for
// itself) and holds every capability over its own namespaces and none over the host's. The
// job runs as the same motor-job uid and gid as under the direct backend; every other owner
// (root's toolchain included) shows as nobody, as in rootless bubblewrap or podman.
//
// What needs a capability in the initial user namespace is done otherwise or refused at plan
// time: device nodes are binds of the host's (devices.hpp), an idmapped bind is refused, and
// the job's supplementary groups must already be none but its own (setgroups is denied).
#pragma once

#include <sys/types.h>

#include <string>

#include "motor/expected.hpp"

namespace motor::sandbox {

struct UserNamespacePlan {
  std::string uid_map;  // "U U 1\n"
  std::string gid_map;  // "G G 1\n"
};

// Parent: the building process must already run as the job account (uid, gid), with no
// supplementary group but `gid`: nothing in the child can change its ids any more.
Expected<UserNamespacePlan> plan_user_namespace(uid_t uid, gid_t gid);

// Child, first thing after clone3: setgroups "deny", then the uid and gid maps.
int map_own_ids(const UserNamespacePlan& plan, const char*& stage);

}  // namespace motor::sandbox
