#include "sandbox/namespaces.hpp"

#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <vector>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"

namespace motor::sandbox {
namespace {

struct Kind {
  const char* name;
  uint64_t flag;
  const char* stage;
  std::optional<Control> control;  // include/motor/test_switches.hpp (nullopt: never weakened)
};

constexpr Kind kKinds[] = {
    {"mnt", CLONE_NEWNS, "mount namespace is not new", std::nullopt},
    {"pid", CLONE_NEWPID, "PID namespace is not new", Control{"pid-namespace"}},
    {"net", CLONE_NEWNET, "network namespace is not new", Control{"network-namespace"}},
    {"ipc", CLONE_NEWIPC, "IPC namespace is not new", Control{"ipc-namespace"}},
    {"uts", CLONE_NEWUTS, "UTS namespace is not new", Control{"uts-namespace"}},
    {"cgroup", CLONE_NEWCGROUP, "cgroup namespace is not new", Control{"cgroup-namespace"}},
};

constexpr Kind kUser = {"user", CLONE_NEWUSER, "user namespace is not new", std::nullopt};

// Test build only: a weakened namespace is neither created nor checked.
bool weakened(const Kind& kind) { return kind.control && control_weakened(*kind.control); }

}  // namespace

uint64_t job_namespace_flags() {
  uint64_t flags = 0;
  for (const Kind& kind : kKinds) {
    if (!weakened(kind)) flags |= kind.flag;
  }
  return flags;
}

Expected<NamespacePlan> plan_namespaces(bool own_user_namespace) {
  NamespacePlan plan;
  plan.clone_flags = job_namespace_flags();
  std::vector<Kind> kinds;
  if (own_user_namespace) {
    plan.clone_flags |= kUser.flag;
    kinds.push_back(kUser);
  }
  for (const Kind& kind : kKinds) {
    if (!weakened(kind)) kinds.push_back(kind);
  }
  for (const Kind& kind : kinds) {
    NamespaceIdentity id;
    id.path = std::string("/proc/self/ns/") + kind.name;
    id.stage = kind.stage;
    struct stat st {};
    if (stat(id.path.c_str(), &st) != 0) return sys_error("namespaces: stat " + id.path);
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    plan.parent.push_back(std::move(id));
  }
  return plan;
}

void use_prepared_network_namespace(NamespacePlan& plan, int net_fd) {
  if (!(plan.clone_flags & CLONE_NEWNET)) return;  // the plan makes no network namespace
  plan.prepared_net_fd = net_fd;
  plan.clone_flags &= ~static_cast<uint64_t>(CLONE_NEWNET);
}

int enter_namespaces(const NamespacePlan& plan, const char*& stage) {
  if (plan.prepared_net_fd >= 0 && setns(plan.prepared_net_fd, CLONE_NEWNET) != 0) {
    stage = "setns into the prepared network namespace";
    return errno;
  }
  for (const NamespaceIdentity& id : plan.parent) {
    struct stat st {};
    if (stat(id.path.c_str(), &st) != 0) {
      stage = "stat /proc/self/ns";
      return errno;
    }
    if (st.st_dev == id.dev && st.st_ino == id.ino) {
      stage = id.stage.c_str();
      return EINVAL;
    }
  }
  if (plan.clone_flags & CLONE_NEWCGROUP) {
    if (unshare(CLONE_NEWCGROUP) != 0) {
      stage = "unshare cgroup namespace at the job's cgroup";
      return errno;
    }
  }
  return 0;
}

}  // namespace motor::sandbox
