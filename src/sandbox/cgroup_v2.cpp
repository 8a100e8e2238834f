// cgroup v2 (production hosts): one unified hierarchy holds the limits (memory.max,
// memory.swap.max, pids.max, cpuset.cpus), clone3(CLONE_INTO_CGROUP) places the job, cgroup.kill
// ends it, cgroup.events reports when it is empty and memory.events counts OOM kills.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "motor/sys_error.hpp"
#include "sandbox/cgroup.hpp"
#include "sandbox/cgroup_internal.hpp"

namespace motor::sandbox {
namespace cgroup_detail {
namespace {

class V2Job final : public JobCgroup {
 public:
  V2Job(std::string name, std::string dir, UniqueFd dirfd)
      : name_(std::move(name)), dir_(std::move(dir)), dirfd_(std::move(dirfd)) {}
  ~V2Job() override { release(); }

  const std::string& name() const override { return name_; }
  int clone_into_fd() const override { return dirfd_.get(); }
  const std::vector<int>& child_attach_fds() const override { return no_fds_; }
  std::string events_path() const override { return dir_ + "/cgroup.events"; }
  Expected<bool> populated() const override { return v2_populated(dir_); }
  Status kill_all() override { return v2_kill(dir_); }
  bool oom_killed() const override {
    auto text = read_text(dir_ + "/memory.events");
    if (!text) return false;
    auto n = keyed_value(*text, "oom_kill");
    return n && *n > 0;
  }
  Expected<OomWatch> watch_oom() override { return OomWatch::on_v2_events_file(dir_); }
  Status remove() override {
    if (auto p = populated(); p.ok() && *p)
      return make_error("io", "rmdir " + dir_ + ": " + std::strerror(EBUSY) + " (processes remain)");
    auto st = remove_dir(dir_);
    if (st) dirfd_.reset();
    return st;
  }
  std::vector<std::string> directories() const override { return {dir_}; }

 private:
  std::string name_;
  std::string dir_;
  UniqueFd dirfd_;
  std::vector<int> no_fds_;
};

Status apply_limits(const std::string& dir, const CgroupLimits& limits) {
  if (limits.memory_bytes < 0 || limits.pids_max < 0) return make_error("bad_request", "negative cgroup limit");
  if (limits.memory_bytes > 0) {
    if (auto st = write_text(dir + "/memory.max", std::to_string(limits.memory_bytes)); !st) return st;
    // Without this the job could push the excess to swap; the limit caps memory plus swap.
    if (exists(dir + "/memory.swap.max"))
      if (auto st = write_text(dir + "/memory.swap.max", "0"); !st) return st;
  }
  if (limits.pids_max > 0)
    if (auto st = write_text(dir + "/pids.max", std::to_string(limits.pids_max)); !st) return st;
  if (!limits.cpus.empty())
    if (auto st = write_text(dir + "/cpuset.cpus", limits.cpus); !st) return st;
  return {};
}

// Enables `wanted` controllers in `dir`'s subtree where `dir` offers them.
Status enable_controllers(const std::string& dir, const std::vector<std::string>& wanted) {
  auto available = read_text(dir + "/cgroup.controllers");
  if (!available) return available.error();
  auto enabled = read_text(dir + "/cgroup.subtree_control");
  if (!enabled) return enabled.error();
  auto avail = words(*available), on = words(*enabled);
  std::vector<std::string> missing;
  for (const auto& c : wanted) {
    if (std::find(on.begin(), on.end(), c) != on.end()) continue;
    if (std::find(avail.begin(), avail.end(), c) == avail.end()) {
      missing.push_back(c);
      continue;
    }
    if (auto st = write_text(dir + "/cgroup.subtree_control", "+" + c); !st) return st;
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& c : missing) list += " " + c;
    return make_error("config", dir + "/cgroup.controllers lacks:" + list);
  }
  return {};
}

class V2Driver final : public CgroupDriver {
 public:
  explicit V2Driver(std::string parent_dir) : parent_dir_(std::move(parent_dir)) {}

  std::string layout() const override { return "v2"; }

  Expected<std::unique_ptr<JobCgroup>> create(const std::string& name, const CgroupLimits& limits) override {
    if (!valid_name(name)) return make_error("bad_request", "invalid job cgroup name '" + name + "'");
    const std::string dir = parent_dir_ + "/" + name;
    auto made = make_dir(dir);
    if (!made) return made.error();
    if (!*made) return make_error("io", "mkdir " + dir + ": " + std::strerror(EEXIST));
    auto st = apply_limits(dir, limits);
    if (st) {
      auto fd = open_dir(dir);
      if (fd) return owned(std::make_unique<V2Job>(name, dir, std::move(*fd)));
      st = fd.error();
    }
    (void)remove_dir(dir);  // we made it a moment ago and nothing runs in it
    return st.error();
  }

  Expected<std::unique_ptr<JobCgroup>> open(const std::string& name) override {
    if (!valid_name(name)) return make_error("bad_request", "invalid job cgroup name '" + name + "'");
    const std::string dir = parent_dir_ + "/" + name;
    auto fd = open_dir(dir);
    if (!fd) return fd.error();
    return owned(std::make_unique<V2Job>(name, dir, std::move(*fd)));
  }

  Expected<std::unique_ptr<JobCgroup>> known(const std::string& name) override {
    if (!valid_name(name)) return make_error("bad_request", "invalid job cgroup name '" + name + "'");
    return owned(std::make_unique<V2Job>(name, parent_dir_ + "/" + name, UniqueFd()));
  }

  std::vector<std::string> list() const override { return list_subdirs(parent_dir_); }
  Status remove_parent() override { return remove_dir(parent_dir_); }

 private:
  std::string parent_dir_;
};

}  // namespace

Expected<std::unique_ptr<CgroupDriver>> make_v2_driver(const std::string& mount, const std::string& parent) {
  const std::vector<std::string> wanted = {"memory", "pids", "cpuset"};
  // Our parent can only offer what the hierarchy root delegates to it.
  if (auto st = enable_controllers(mount, wanted); !st) return st.error();
  const std::string parent_dir = mount + "/" + parent;
  auto made = make_dir(parent_dir);
  if (!made) return made.error();
  if (auto st = enable_controllers(parent_dir, wanted); !st) return st.error();
  return std::unique_ptr<CgroupDriver>(std::make_unique<V2Driver>(parent_dir));
}

}  // namespace cgroup_detail
}  // namespace motor::sandbox
