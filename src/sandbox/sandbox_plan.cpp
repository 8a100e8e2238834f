#include "sandbox/sandbox_plan.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <string_view>

#include "motor/sys_error.hpp"
#include "motor/test_switches.hpp"
#include "sandbox/capabilities.hpp"
#include "sandbox/devices.hpp"
#include "sandbox/fd_hygiene.hpp"
#include "sandbox/git_file_masks.hpp"
#include "sandbox/hostname.hpp"
#include "sandbox/loopback.hpp"
#include "sandbox/overlay.hpp"
#include "sandbox/proc.hpp"
#include "sandbox/user_namespace.hpp"

namespace motor::sandbox {
namespace {

constexpr uint64_t kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr uint64_t kWritable = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

// Paths the sandbox itself owns: a bind may not sit on, over or under them (under /tmp is fine:
// the tmpfs is mounted first and the bind lands on it).
constexpr std::array<std::string_view, 10> kOwned = {"/etc/passwd", "/etc/group", "/etc/hostname",
                                                     "/etc/hosts",  "/etc/nsswitch.conf", "/etc/resolv.conf",
                                                     "/proc",       "/dev",  "/tmp",  "/.motor"};

bool is_under(std::string_view path, std::string_view dir) {
  return path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/';
}

Status check_bind_target(const std::string& target, const std::string& what) {
  if (auto st = validate_absolute_path(target, what + " target"); !st) return st;
  if (target == "/") return make_error("config", what + " cannot be bound over the sandbox's root");
  for (std::string_view owned : kOwned) {
    if (target == owned || is_under(owned, target))
      return make_error("config", what + " target " + target + " would cover the sandbox's own " + std::string(owned));
    if (owned != "/tmp" && is_under(target, owned))
      return make_error("config", what + " target " + target + " lies inside the sandbox's own " + std::string(owned));
  }
  return {};
}

bool safe_passwd_field(const std::string& s) {
  return s.find_first_of(":\n") == std::string::npos && s.find('\0') == std::string::npos;
}

Status add_bind(MountPlan& plan, const BindMount& bind, uint64_t attrs, const std::string& what) {
  auto is_dir = host_bind_source(bind.source, what);
  if (!is_dir) return is_dir.error();
  const std::string target = bind.target.empty() ? bind.source : bind.target;
  if (auto st = check_bind_target(target, what); !st) return st;
  plan.ops.push_back(bind_op(bind.source, target, *is_dir, attrs, "bind " + what + " " + bind.source + " at " + target));
  if (bind.idmap) {
    if (!(attrs & MOUNT_ATTR_RDONLY)) return make_error("config", "an idmapped bind (" + bind.source + ") must be read-only");
    auto userns = idmap_user_namespace(*bind.idmap);
    if (!userns) return userns.error();
    plan.ops.back().idmap_userns = std::make_shared<const UniqueFd>(std::move(*userns));
    plan.ops.back().stage = "bind (idmapped) " + what + " " + bind.source + " at " + target;
  }
  return {};
}

// A shared directory under a private writable layer (sandbox/overlay.hpp).
Status add_overlay(MountPlan& plan, const BindMount& bind, uint64_t upper_bytes) {
  const std::string what = "overlaid path";
  if (auto st = host_bind_directory(bind.source, what); !st) return st;
  const std::string target = bind.target.empty() ? bind.source : bind.target;
  if (auto st = check_bind_target(target, what); !st) return st;
  plan.ops.push_back(overlay_op(bind.source, target, upper_bytes));
  if (bind.idmap) {
    auto userns = idmap_user_namespace(*bind.idmap);
    if (!userns) return userns.error();
    plan.ops.back().idmap_userns = std::make_shared<const UniqueFd>(std::move(*userns));
  }
  return {};
}

Status add_toolchain(MountPlan& plan, const ToolchainPath& entry) {
  const std::string what = "toolchain path";
  if (auto st = validate_absolute_path(entry.path, what); !st) return st;
  struct stat st {};
  if (lstat(entry.path.c_str(), &st) != 0) {
    if (errno == ENOENT && entry.optional) return {};
    return sys_error(what + " " + entry.path);
  }
  if (auto ok = check_no_symlink_parents(entry.path, what); !ok) return ok;
  if (auto ok = check_bind_target(entry.path, what); !ok) return ok;
  if (S_ISLNK(st.st_mode)) {  // merged-/usr links (/bin -> usr/bin), /etc/localtime: same text
    std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
    const ssize_t n = readlink(entry.path.c_str(), text.data(), text.size());
    if (n < 0 || static_cast<size_t>(n) >= text.size()) return sys_error("readlink " + entry.path);
    text.resize(static_cast<size_t>(n));
    plan.ops.push_back(symlink_op(entry.path, text));
    return {};
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
    return make_error("config", what + " " + entry.path + " is neither a directory, a file nor a symlink");
  // Test build only: a weakened toolchain bind is writable.
  const uint64_t attrs = control_weakened("readonly-toolchain") ? kWritable : kReadOnly;
  plan.ops.push_back(bind_op(entry.path, entry.path, S_ISDIR(st.st_mode), attrs, "bind toolchain " + entry.path));
  return {};
}

Status check_init(const std::string& path) {
  if (auto st = validate_absolute_path(path, "init_path"); !st) return st;
  if (auto st = check_no_symlink_parents(path, "init_path"); !st) return st;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return sys_error("init_path " + path);
  if (!S_ISREG(st.st_mode) || (st.st_mode & 0111) == 0)
    return make_error("config", "init_path " + path + " is not an executable regular file");
  if (st.st_mode & 0022)
    return make_error("config", "init_path " + path + " is group- or world-writable");
  return {};
}

// motor-init for execveat(AT_EMPTY_PATH): no bind, so no host path in the job's mount table.
Expected<UniqueFd> open_init(const std::string& path) {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how)));
  if (!fd) return sys_error("opening init_path " + path);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return make_error("config", "init_path " + path + " is not a regular file");
  return fd;
}

struct ChildState {
  SandboxPlan plan;
  MountScratch scratch;
  mode_t saved_umask = 022;
};

}  // namespace

namespace {

Status check_config(const SandboxConfig& config) {
  if (config.uid == 0 || config.gid == 0)
    return make_error("config", "the job account must not be root (uid and gid must be non-zero)");
  if (config.user_name.empty() || config.group_name.empty() || !safe_passwd_field(config.user_name) ||
      !safe_passwd_field(config.group_name))
    return make_error("config", "job user and group names must be non-empty, without ':' or newlines");
  if (auto st = validate_hostname(config.hostname); !st) return st.error();
  if (config.tmp_size_bytes == 0 || config.shm_size_bytes == 0)
    return make_error("config", "tmp_size_bytes and shm_size_bytes must be set");
  if (auto st = check_init(config.init_path); !st) return st.error();
  if (config.workspace_later ? config.workspace.target.empty() : config.workspace.source.empty())
    return make_error("config", "the sandbox needs a workspace (or, to mount it in later, its target)");
  return {};
}

// An idmapped bind takes CAP_SYS_ADMIN over the source's filesystem, which a builder in its own
// user namespace does not have: refused here rather than failing in the child.
Status check_no_idmap(const SandboxConfig& config) {
  if (const BindMount* b = first_idmapped_bind(config)) {
    return make_error("config", "an idmapped bind (" + b->source +
                                    ", a shared cache shown as the job's own) needs the direct job backend: a sandbox "
                                    "in its own user namespace cannot make one");
  }
  return {};
}

// /etc/passwd, group, hostname, hosts, nsswitch.conf and, for an outbound job, resolv.conf.
Status add_identity_files(MountPlan& mounts, const SandboxConfig& config) {
  const std::string home = config.workspace.target.empty() ? config.workspace.source : config.workspace.target;
  if (!safe_passwd_field(home)) return make_error("config", "workspace target holds ':' or a newline");
  const std::string uid = std::to_string(config.uid);
  const std::string gid = std::to_string(config.gid);
  mounts.ops.push_back(file_op("/etc/passwd",
                               "root:x:0:0:root:/root:/usr/sbin/nologin\n" + config.user_name + ":x:" + uid + ":" +
                                   gid + ":Motor job:" + home + ":/bin/sh\n" +
                                   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                               0444));
  mounts.ops.push_back(file_op("/etc/group", "root:x:0:\n" + config.group_name + ":x:" + gid + ":\nnogroup:x:65534:\n", 0444));
  mounts.ops.push_back(file_op("/etc/hostname", config.hostname + "\n", 0444));
  mounts.ops.push_back(file_op("/etc/hosts",
                               "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" +
                                   config.hostname + "\n",
                               0444));
  mounts.ops.push_back(file_op("/etc/nsswitch.conf",
                               std::string("passwd: files\ngroup: files\nshadow: files\nhosts: files") +
                                   (config.network ? " dns" : "") + "\nnetworks: files\nprotocols: files\nservices: files\n",
                               0444));
  if (config.network) {
    mounts.ops.push_back(file_op("/etc/resolv.conf",
                                 "nameserver " + format_ipv4(config.network->gateway) + "\noptions timeout:2 attempts:2\n",
                                 0444));
  }
  return {};
}

// A private tmpfs at /tmp, or a host scratch directory (motor-bb-runner's temporary_directory).
Status add_tmp(MountPlan& mounts, const SandboxConfig& config) {
  if (config.tmp_source.empty()) {
    mounts.ops.push_back(filesystem_op("tmpfs", "/tmp", {{"mode", "1777"}, {"size", std::to_string(config.tmp_size_bytes)}},
                                       kWritable, false));
    return {};
  }
  if (auto st = host_bind_directory(config.tmp_source, "tmp source"); !st) return st;
  mounts.ops.push_back(bind_op(config.tmp_source, "/tmp", true, host_tmp_bind_attrs(), "bind the host tmp directory"));
  return {};
}

}  // namespace

uint64_t workspace_bind_attrs() {
  // Test build only: "nosuid" leaves the workspace able to hold a working setuid binary.
  return control_weakened("nosuid") ? kWritable & ~uint64_t{MOUNT_ATTR_NOSUID} : kWritable;
}

uint64_t host_tmp_bind_attrs() { return kWritable; }

Expected<SandboxPlan> plan_sandbox(const SandboxConfig& config) {
  if (auto st = check_config(config); !st) return st.error();

  SandboxPlan plan;
  auto ns = plan_namespaces(config.own_user_namespace);
  if (!ns) return ns.error();
  plan.namespaces = std::move(*ns);
  if (config.own_user_namespace) {
    if (auto st = check_no_idmap(config); !st) return st.error();
    auto ids = plan_user_namespace(config.uid, config.gid);
    if (!ids) return ids.error();
    plan.user_namespace = std::move(*ids);
  }
  auto caps = plan_capabilities();
  if (!caps) return caps.error();
  plan.capabilities = *caps;
  auto seccomp = compile_seccomp_policy(config.deny_sockets);
  if (!seccomp) return seccomp.error();
  plan.seccomp = std::move(*seccomp);
  plan.hostname = config.hostname;
  plan.network = config.network;

  MountPlan& mounts = plan.mounts;
  for (const ToolchainPath& entry : config.toolchain) {
    if (auto st = add_toolchain(mounts, entry); !st) return st.error();
  }
  if (config.workspace_later) {
    if (auto st = check_bind_target(config.workspace.target, "workspace"); !st) return st.error();
    mounts.ops.push_back(directory_op(config.workspace.target, 0755));
  } else if (auto st = add_bind(mounts, config.workspace, workspace_bind_attrs(), "workspace"); !st) {
    return st.error();
  }
  for (const BindMount& bind : config.writable) {
    if (auto st = add_bind(mounts, bind, kWritable, "writable path"); !st) return st.error();
  }
  for (const BindMount& bind : config.read_only) {
    if (auto st = add_bind(mounts, bind, kReadOnly, "read-only path"); !st) return st.error();
  }
  for (const BindMount& bind : config.overlaid) {
    if (auto st = add_overlay(mounts, bind, config.tmp_size_bytes); !st) return st.error();
  }
  for (const auto& [path, text] : config.symlinks) mounts.ops.push_back(symlink_op(path, text));
  if (config.mask_special_git_files) {
    plan.git_masks_root = config.workspace.target.empty() ? config.workspace.source : config.workspace.target;
  }
  if (control_weakened("workspace-names")) {
    mounts.ops.push_back(bind_op(config.init_path, kSandboxInitPath, false, kReadOnly, "bind motor-init"));
  } else {
    auto init = open_init(config.init_path);
    if (!init) return init.error();
    plan.init_fd = std::make_shared<const UniqueFd>(std::move(*init));
  }
  if (auto st = add_identity_files(mounts, config); !st) return st.error();
  if (auto st = add_tmp(mounts, config); !st) return st.error();
  plan_devices(mounts.ops, config.shm_size_bytes,
               config.own_user_namespace ? DeviceNodes::kBoundFromHost : DeviceNodes::kMade);
  plan_proc(mounts.ops);
  if (control_weakened("no-sys")) mounts.ops.push_back(bind_op("/sys", "/sys", true, kWritable, "bind host /sys (test build)"));
  if (auto st = finish_mount_plan(mounts); !st) return st.error();
  return plan;
}

ChildHooks make_child_hooks(const SandboxPlan& plan) {
  auto state = std::make_shared<ChildState>();
  state->plan = plan;
  state->scratch = make_mount_scratch(state->plan.mounts);

  ChildHooks hooks;
  hooks.stamps = std::make_shared<ChildStamps>();
  hooks.clone_flags = plan.namespaces.clone_flags;
  hooks.exec_fd = plan.init_fd ? plan.init_fd->get() : -1;
  hooks.own_user_namespace = plan.user_namespace.has_value();
  hooks.before_credentials = [state, stamps = hooks.stamps.get()](const char*& stage) -> int {
    const SandboxPlan& p = state->plan;
    if (p.user_namespace) {
      if (int err = map_own_ids(*p.user_namespace, stage); err != 0) return err;
    }
    state->saved_umask = umask(0);  // modes in the plan are exact
    if (int err = enter_namespaces(p.namespaces, stage); err != 0) return err;
    if (p.network) {
      if (int err = attach_job_network(*p.network, stage); err != 0) return err;
    }
    if (int err = apply_mounts(p.mounts, state->scratch, stage); err != 0) return err;
    stamps->mounted = monotonic_ns();
    // Never outside a UTS namespace of the job's own (a test build can leave it out).
    if (p.namespaces.clone_flags & CLONE_NEWUTS) {
      if (int err = apply_hostname(p.hostname, stage); err != 0) return err;
    }
    if (int err = bring_up_loopback(stage); err != 0) return err;
    if (!p.git_masks_root.empty()) {
      if (int err = mask_special_git_files(p.git_masks_root.c_str(), stage); err != 0) return err;
    }
    if (int err = drop_bounding_set(p.capabilities, stage); err != 0) return err;
    stamps->confined = monotonic_ns();
    umask(state->saved_umask);
    // Test build only: without no_new_privs the filter can only be loaded while still root.
    if (control_weakened("no-new-privs") && !control_weakened("seccomp")) {
      stage = "seccomp: load filter";
      return load_seccomp_program(p.seccomp);
    }
    return 0;
  };
  hooks.after_credentials = [state](const char*& stage) -> int {
    const SandboxPlan& p = state->plan;
    if (int err = close_inherited_fds(stage); err != 0) return err;
    if (int err = drop_all_capabilities(p.capabilities, stage); err != 0) return err;
    if (control_weakened("seccomp") || control_weakened("no-new-privs")) return 0;  // test build only
    stage = "seccomp: load filter";
    return load_seccomp_program(p.seccomp);  // last: it may refuse calls the steps above make
  };
  return hooks;
}

std::vector<std::string> init_argv(const std::vector<std::string>& command) {
  std::vector<std::string> argv{"motor-init", "--"};
  // Test build only: motor-init stays dumpable (its memory writable through /proc/1/mem).
  if (control_weakened("init-nondumpable")) argv.insert(argv.begin() + 1, "--test-keep-dumpable");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::vector<std::string> awaiting_init_argv() {
  std::vector<std::string> argv = init_argv({});
  argv.back() = "--await-command";  // in place of "--": no command yet
  return argv;
}

std::string init_command_message(const std::vector<std::string>& init_argv, const std::vector<std::string>& env,
                                 const std::string& cwd) {
  std::string body = std::to_string(init_argv.empty() ? 0 : init_argv.size() - 1);
  body += '\0';
  body += std::to_string(env.size());
  body += '\0';
  auto field = [&body](const std::string& s) {
    body += s;
    body += '\0';
  };
  field(cwd);
  for (size_t i = 1; i < init_argv.size(); ++i) field(init_argv[i]);
  for (const auto& e : env) field(e);
  const auto size = static_cast<uint32_t>(body.size());
  std::string message(1, 'c');
  message.append(reinterpret_cast<const char*>(&size), sizeof size);
  return message + body;
}

}  // namespace motor::sandbox
