// cgroup v1: one hierarchy per controller (memory, pids, cpuset, and freezer on pure v1). The
// child attaches itself by writing "0" into each hierarchy's cgroup.procs (opened here, by the
// parent). Pure v1 kills by freezing, SIGKILLing every pid and thawing until the cgroup is
// empty. The hybrid layout keeps the limits here but also gives the job a cgroup on the unified
// cgroup2 mount for clone3(CLONE_INTO_CGROUP), cgroup.kill and cgroup.events.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "motor/sys_error.hpp"
#include "sandbox/cgroup.hpp"
#include "motor/test_switches.hpp"
#include "sandbox/cgroup_internal.hpp"

namespace motor::sandbox {
namespace cgroup_detail {
namespace {

using Clock = std::chrono::steady_clock;

// Where each controller we use lives: an index into the driver's hierarchy list, or -1.
struct Roles {
  int memory = -1;
  int pids = -1;
  int cpuset = -1;
  int freezer = -1;
};

class V1Job final : public JobCgroup {
 public:
  // `dirs[i]` is the job's directory in hierarchy i, or "" where it has none.
  V1Job(std::string name, std::vector<std::string> dirs, Roles roles, std::string unified_dir, UniqueFd unified_fd,
        std::vector<UniqueFd> attach)
      : name_(std::move(name)),
        dirs_(std::move(dirs)),
        roles_(roles),
        unified_dir_(std::move(unified_dir)),
        unified_fd_(std::move(unified_fd)),
        attach_(std::move(attach)) {
    for (const auto& fd : attach_) attach_raw_.push_back(fd.get());
  }
  ~V1Job() override { release(); }

  const std::string& name() const override { return name_; }
  int clone_into_fd() const override { return unified_fd_.get(); }
  const std::vector<int>& child_attach_fds() const override { return attach_raw_; }

  std::string events_path() const override {
    return unified_dir_.empty() ? std::string() : unified_dir_ + "/cgroup.events";
  }

  Expected<bool> populated() const override {
    if (!unified_dir_.empty()) return v2_populated(unified_dir_);
    bool any_dir = false;
    for (const auto& d : dirs_) {
      if (d.empty()) continue;
      any_dir = true;
      auto pids = read_pids(d + "/cgroup.procs");
      if (!pids) return pids.error();
      if (!pids->empty()) return true;
    }
    if (!any_dir) return make_error("io", "job cgroup " + name_ + " has no directories left");
    return false;
  }

  Status kill_all() override {
    release_cpus();
    if (!unified_dir_.empty()) return v2_kill(unified_dir_);
    return freeze_and_kill();
  }

  bool oom_killed() const override {
    if (roles_.memory < 0 || dirs_[static_cast<size_t>(roles_.memory)].empty()) return false;
    auto text = read_text(dirs_[static_cast<size_t>(roles_.memory)] + "/memory.oom_control");
    if (!text) return false;
    auto n = keyed_value(*text, "oom_kill");
    return n && *n > 0;
  }

  Expected<OomWatch> watch_oom() override {
    if (roles_.memory < 0 || dirs_[static_cast<size_t>(roles_.memory)].empty())
      return make_error("io", "job cgroup " + name_ + " has no memory cgroup to watch");
    return OomWatch::on_v1_oom_control(dirs_[static_cast<size_t>(roles_.memory)]);
  }

  Status remove() override {
    // Fail fast while processes remain instead of spending the EBUSY retries on every hierarchy.
    if (auto p = populated(); p.ok() && *p)
      return make_error("io", "rmdir " + directories().front() + ": " + std::strerror(EBUSY) + " (processes remain)");
    Status first;
    for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
      if (it->empty()) continue;
      auto st = remove_dir(*it);
      if (!st && first) first = st;
    }
    if (!unified_dir_.empty()) {
      auto st = remove_dir(unified_dir_);
      if (!st && first) first = st;
    }
    if (first) {
      attach_raw_.clear();
      attach_.clear();
      unified_fd_.reset();
    }
    return first;
  }

  std::vector<std::string> directories() const override {
    std::vector<std::string> out;
    for (const auto& d : dirs_)
      if (!d.empty()) out.push_back(d);
    if (!unified_dir_.empty()) out.push_back(unified_dir_);
    return out;
  }

 private:
  // A job being killed gives up its CPU claim: each process runs its own exit (unmapping,
  // uncharging), and 1,000 of them pinned to one CPU exit one after another there. Widened to
  // the parent's CPUs, they exit on every core (issue 20's cancel row). Best effort: the kill
  // goes on whatever this finds.
  void release_cpus() {
    if (roles_.cpuset < 0 || dirs_[static_cast<size_t>(roles_.cpuset)].empty()) return;
    const std::string& dir = dirs_[static_cast<size_t>(roles_.cpuset)];
    auto cpus = read_text(dir.substr(0, dir.rfind('/')) + "/cpuset.cpus");
    if (cpus && !trim(*cpus).empty()) (void)write_text(dir + "/cpuset.cpus", trim(*cpus));
  }

  // Pure v1 has no cgroup.kill. Freezing first means no process can fork a new one between our
  // reading cgroup.procs and the SIGKILLs; thawing lets the signals take effect. Repeat until a
  // frozen read finds the cgroup empty, for at most about two seconds.
  Status freeze_and_kill() {
    if (roles_.freezer < 0 || dirs_[static_cast<size_t>(roles_.freezer)].empty())
      return make_error("io", "job cgroup " + name_ + " has no freezer cgroup: cannot kill its processes");
    const std::string freezer = dirs_[static_cast<size_t>(roles_.freezer)];
    const std::string state = freezer + "/freezer.state";
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    struct Thaw {
      const std::string& path;
      ~Thaw() { (void)write_text(path, "THAWED"); }
    };
    for (;;) {
      {
        if (auto st = write_text(state, "FROZEN"); !st) return st;
        Thaw thaw{state};
        const auto freeze_deadline = Clock::now() + std::chrono::milliseconds(500);
        for (;;) {
          auto s = read_text(state);
          if (!s) return s.error();
          // A task stuck in the kernel can keep it FREEZING; kill anyway once the wait is up.
          if (trim(*s) == "FROZEN" || Clock::now() > freeze_deadline) break;
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        std::set<pid_t> pids;
        for (const auto& d : dirs_) {
          if (d.empty()) continue;
          auto p = read_pids(d + "/cgroup.procs");
          if (!p) return p.error();
          pids.insert(p->begin(), p->end());
        }
        if (pids.empty()) return {};
        for (pid_t pid : pids)
          if (::kill(pid, SIGKILL) != 0 && errno != ESRCH)
            return sys_error("kill " + std::to_string(pid) + " in " + freezer);
      }  // thawed here: the SIGKILLs take effect
      if (Clock::now() > deadline) return {};  // every pid seen has been sent SIGKILL
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::string name_;
  std::vector<std::string> dirs_;
  Roles roles_;
  std::string unified_dir_;
  UniqueFd unified_fd_;
  std::vector<UniqueFd> attach_;
  std::vector<int> attach_raw_;
};

// Removes what create() made if it fails half way.
struct Rollback {
  std::vector<std::string> made;
  bool keep = false;
  ~Rollback() {
    if (keep) return;
    for (auto it = made.rbegin(); it != made.rend(); ++it) (void)remove_dir(*it);
  }
};

class V1Driver final : public CgroupDriver {
 public:
  V1Driver(std::vector<std::string> parent_dirs, Roles roles, std::string unified_parent)
      : parent_dirs_(std::move(parent_dirs)), roles_(roles), unified_parent_(std::move(unified_parent)) {}

  std::string layout() const override { return unified_parent_.empty() ? "v1" : "hybrid"; }

  Expected<std::unique_ptr<JobCgroup>> create(const std::string& name, const CgroupLimits& limits) override {
    if (!valid_name(name)) return make_error("bad_request", "invalid job cgroup name '" + name + "'");
    if (limits.memory_bytes < 0 || limits.pids_max < 0) return make_error("bad_request", "negative cgroup limit");
    Rollback rollback;
    std::vector<std::string> dirs;
    std::vector<UniqueFd> attach;
    for (size_t i = 0; i < parent_dirs_.size(); ++i) {
      const std::string dir = parent_dirs_[i] + "/" + name;
      auto made = make_dir(dir);
      if (!made) return made.error();
      if (!*made) return make_error("io", "mkdir " + dir + ": " + std::strerror(EEXIST));
      rollback.made.push_back(dir);
      dirs.push_back(dir);
      if (auto st = apply_limits(static_cast<int>(i), dir, limits); !st) return st.error();
      auto fd = open_write(dir + "/cgroup.procs");
      if (!fd) return fd.error();
      attach.push_back(std::move(*fd));
    }
    std::string unified_dir;
    UniqueFd unified_fd;
    if (!unified_parent_.empty()) {
      unified_dir = unified_parent_ + "/" + name;
      auto made = make_dir(unified_dir);
      if (!made) return made.error();
      if (!*made) return make_error("io", "mkdir " + unified_dir + ": " + std::strerror(EEXIST));
      rollback.made.push_back(unified_dir);
      auto fd = open_dir(unified_dir);
      if (!fd) return fd.error();
      unified_fd = std::move(*fd);
    }
    rollback.keep = true;
    return owned(std::make_unique<V1Job>(name, std::move(dirs), roles_, std::move(unified_dir), std::move(unified_fd),
                                         std::move(attach)));
  }

  Expected<std::unique_ptr<JobCgroup>> open(const std::string& name) override {
    if (!valid_name(name)) return make_error("bad_request", "invalid job cgroup name '" + name + "'");
    std::vector<std::string> dirs;
    std::vector<UniqueFd> attach;
    bool found = false;
    for (const auto& parent : parent_dirs_) {
      const std::string dir = parent + "/" + name;
      if (!exists(dir)) {
        dirs.emplace_back();
        continue;
      }
      found = true;
      dirs.push_back(dir);
      auto fd = open_write(dir + "/cgroup.procs");
      if (!fd) return fd.error();
      attach.push_back(std::move(*fd));
    }
    std::string unified_dir;
    UniqueFd unified_fd;
    if (!unified_parent_.empty() && exists(unified_parent_ + "/" + name)) {
      found = true;
      unified_dir = unified_parent_ + "/" + name;
      auto fd = open_dir(unified_dir);
      if (!fd) return fd.error();
      unified_fd = std::move(*fd);
    }
    if (!found)
      return make_error("io", "no job cgroup '" + name + "' under " + parent_dirs_.front() + ": " +
                                  std::strerror(ENOENT));
    return owned(std::make_unique<V1Job>(name, std::move(dirs), roles_, std::move(unified_dir), std::move(unified_fd),
                                         std::move(attach)));
  }

  Expected<std::unique_ptr<JobCgroup>> known(const std::string& name) override {
    if (!valid_name(name)) return make_error("bad_request", "invalid job cgroup name '" + name + "'");
    std::vector<std::string> dirs;
    for (const auto& parent : parent_dirs_) dirs.push_back(parent + "/" + name);
    std::string unified_dir = unified_parent_.empty() ? std::string() : unified_parent_ + "/" + name;
    return owned(std::make_unique<V1Job>(name, std::move(dirs), roles_, std::move(unified_dir), UniqueFd(),
                                         std::vector<UniqueFd>{}));
  }

  std::vector<std::string> list() const override {
    std::set<std::string> names;
    for (const auto& p : parent_dirs_)
      for (auto& n : list_subdirs(p)) names.insert(std::move(n));
    if (!unified_parent_.empty())
      for (auto& n : list_subdirs(unified_parent_)) names.insert(std::move(n));
    return {names.begin(), names.end()};
  }

  Status remove_parent() override {
    Status first;
    std::vector<std::string> dirs = parent_dirs_;
    if (!unified_parent_.empty()) dirs.push_back(unified_parent_);
    for (const auto& dir : dirs) {
      if (auto st = remove_dir(dir); !st && first) first = st;
    }
    return first;
  }

 private:
  Status apply_limits(int hierarchy, const std::string& dir, const CgroupLimits& limits) {
    // One hierarchy can carry several controllers (e.g. a co-mounted "cpuset,memory").
    if (hierarchy == roles_.memory && limits.memory_bytes > 0) {
      const std::string value = std::to_string(limits.memory_bytes);
      if (auto st = write_text(dir + "/memory.limit_in_bytes", value); !st) return st;
      // memsw (memory + swap) must be >= the memory limit, so it is written second.
      if (exists(dir + "/memory.memsw.limit_in_bytes"))
        if (auto st = write_text(dir + "/memory.memsw.limit_in_bytes", value); !st) return st;
      // Socket buffers: v1 charges them to the cgroup only once its tcp limit is set (then to that
      // counter, apart from memory.limit_in_bytes), and that counter holds every protocol that
      // accounts socket memory (TCP, UDP receive queues). Without it a job's queued loopback
      // buffers are bounded only by the host-wide tcp_mem/udp_mem. (v2: memory.max charges them.)
      // Test build only: "socket-buffers" leaves it unset.
      if (!control_weakened("socket-buffers") && exists(dir + "/memory.kmem.tcp.limit_in_bytes"))
        if (auto st = write_text(dir + "/memory.kmem.tcp.limit_in_bytes", value); !st) return st;
    }
    if (hierarchy == roles_.pids && limits.pids_max > 0)
      if (auto st = write_text(dir + "/pids.max", std::to_string(limits.pids_max)); !st) return st;
    if (hierarchy == roles_.cpuset) {
      // A v1 cpuset starts empty and refuses tasks until both cpus and mems are set.
      const std::string parent = parent_dirs_[static_cast<size_t>(hierarchy)];
      std::string cpus = limits.cpus;
      if (cpus.empty()) {
        auto c = read_text(parent + "/cpuset.cpus");
        if (!c) return c.error();
        cpus = trim(*c);
      }
      auto mems = read_text(parent + "/cpuset.mems");
      if (!mems) return mems.error();
      if (auto st = write_text(dir + "/cpuset.cpus", cpus); !st) return st;
      if (auto st = write_text(dir + "/cpuset.mems", trim(*mems)); !st) return st;
    }
    return {};
  }

  std::vector<std::string> parent_dirs_;
  Roles roles_;
  std::string unified_parent_;
};

// Copies the hierarchy root's cpuset.cpus/mems into our parent where they are still empty.
Status init_cpuset_parent(const std::string& root, const std::string& parent_dir) {
  for (const char* file : {"/cpuset.cpus", "/cpuset.mems"}) {
    auto mine = read_text(parent_dir + file);
    if (!mine) return mine.error();
    if (!trim(*mine).empty()) continue;
    auto from = read_text(root + file);
    if (!from) return from.error();
    if (auto st = write_text(parent_dir + file, trim(*from)); !st) return st;
  }
  return {};
}

}  // namespace

Expected<std::unique_ptr<CgroupDriver>> make_v1_driver(const std::map<std::string, V1Hierarchy>& by_controller,
                                                      const std::string& unified_mount, const std::string& parent) {
  std::vector<std::string> order = {"memory", "pids", "cpuset"};
  if (unified_mount.empty()) order.emplace_back("freezer");
  std::vector<std::string> mounts;  // one entry per hierarchy, in `order`
  Roles roles;
  for (const auto& c : order) {
    auto it = by_controller.find(c);
    if (it == by_controller.end())
      return make_error("config", "no cgroup v1 hierarchy has the " + c + " controller");
    auto pos = std::find(mounts.begin(), mounts.end(), it->second.mount);
    int index = static_cast<int>(pos - mounts.begin());
    if (pos == mounts.end()) mounts.push_back(it->second.mount);
    if (c == "memory") roles.memory = index;
    if (c == "pids") roles.pids = index;
    if (c == "cpuset") roles.cpuset = index;
    if (c == "freezer") roles.freezer = index;
  }
  std::vector<std::string> parent_dirs;
  for (size_t i = 0; i < mounts.size(); ++i) {
    const std::string dir = mounts[i] + "/" + parent;
    auto made = make_dir(dir);
    if (!made) return made.error();
    if (static_cast<int>(i) == roles.cpuset)
      if (auto st = init_cpuset_parent(mounts[i], dir); !st) return st.error();
    parent_dirs.push_back(dir);
  }
  std::string unified_parent;
  if (!unified_mount.empty()) {
    unified_parent = unified_mount + "/" + parent;
    auto made = make_dir(unified_parent);
    if (!made) return made.error();
    if (!exists(unified_parent + "/cgroup.kill"))
      return make_error("config", unified_parent + "/cgroup.kill is missing: the kernel cannot kill a cgroup2 "
                                                   "cgroup (needs 5.14); use the v1 layout");
  }
  return std::unique_ptr<CgroupDriver>(std::make_unique<V1Driver>(std::move(parent_dirs), roles, std::move(unified_parent)));
}

}  // namespace cgroup_detail
}  // namespace motor::sandbox
