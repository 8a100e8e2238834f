// A KVM device node of a test's own making (the same device as /dev/kvm, with the mode and group
// the test chooses), and a mount namespace for a runner in which /dev/kvm is that node: what
// motor-qemu can open differs from machine to machine, so tests make the case they need.
#pragma once

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "support/runner_harness.hpp"

namespace motor::test {

class KvmNode {
 public:
  KvmNode(mode_t mode, gid_t group) : dir_(make_temp_dir()) {
    chmod(dir_.c_str(), 0755);  // motor-qemu must reach the node to be refused by its mode alone
    struct stat real {};
    const dev_t dev = stat("/dev/kvm", &real) == 0 && S_ISCHR(real.st_mode) ? real.st_rdev : makedev(10, 232);
    made_ = mknod(path().c_str(), S_IFCHR | mode, dev) == 0 && chown(path().c_str(), 0, group) == 0 &&
            chmod(path().c_str(), mode) == 0;
  }
  ~KvmNode() { remove_tree(dir_); }
  KvmNode(const KvmNode&) = delete;
  KvmNode& operator=(const KvmNode&) = delete;

  bool made() const { return made_; }
  std::string path() const { return dir_ + "/kvm"; }

  // For RunnerProcess::use_binary: runs `runner` in a private mount namespace (it dies with the
  // runner) in which /dev/kvm is this node. On a host without a /dev/kvm (no KVM driver; seen on
  // one machine of this kind) there is nothing to bind over, so that namespace gets a /dev of its
  // own: a tmpfs holding a bind of each of /dev's entries and the node as kvm, moved onto /dev.
  std::vector<std::string> runner_with_node_as_dev_kvm(const std::string& runner) const {
    const std::string own_dev = dir_ + "/dev";
    const std::string script =
        "set -u\n"
        "if [ -e /dev/kvm ]; then mount --bind " + path() + " /dev/kvm || exit 126; exec \"$0\" \"$@\"; fi\n"
        "d=" + own_dev + "\n"
        "mkdir -p \"$d\" && mount -t tmpfs -o mode=0755 motor-test-dev \"$d\" || exit 126\n"
        "for e in /dev/* /dev/.[!.]*; do\n"
        "  [ -e \"$e\" ] || [ -L \"$e\" ] || continue\n"
        "  n=${e#/dev/}\n"
        "  if [ -L \"$e\" ]; then cp -P \"$e\" \"$d/$n\"\n"
        "  elif [ -d \"$e\" ]; then mkdir \"$d/$n\" && mount --rbind \"$e\" \"$d/$n\"\n"
        "  else : > \"$d/$n\" && mount --bind \"$e\" \"$d/$n\"; fi || exit 126\n"
        "done\n"
        ": > \"$d/kvm\" && mount --bind " + path() + " \"$d/kvm\" && mount --move \"$d\" /dev || exit 126\n"
        "exec \"$0\" \"$@\"\n";
    return {"--mount", "--propagation", "slave", "--", "/bin/sh", "-c", script, runner};
  }

 private:
  std::string dir_;
  bool made_ = false;
};

}  // namespace motor::test
