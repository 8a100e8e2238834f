// QEMU started by libvirt (qemu_launcher.hpp), each call a motor-vm-helper child process
// (helper_call.hpp): create writes the domain XML (domain_xml.hpp) into the job's directory and
// creates the domain paused with its memory hard limit; destroy also deletes the directory.
#pragma once

#include <uv.h>

#include <memory>
#include <string>
#include <vector>

#include "vm/helper_call.hpp"
#include "vm/qemu_launcher.hpp"

namespace motor::vm {

struct LibvirtLauncherSpec {
  std::string helper_path;  // motor-vm-helper
  std::string libvirt_uri;
  std::string domain_name;
  std::string work_dir;     // the job's directory: the XML goes here; destroy deletes it
  int64_t hard_limit_bytes = 0;
};

class LibvirtLauncher final : public QemuLauncher {
 public:
  LibvirtLauncher(uv_loop_t* loop, LibvirtLauncherSpec spec) : loop_(loop), spec_(std::move(spec)) {}

  Status create(const DomainSpec& domain, Answer done) override;
  Status resume(Answer done) override;
  Status destroy(Answer done) override;
  bool creating() const override { return create_ && !create_->finished(); }
  const std::vector<std::string>& environment_names() const override;
  bool limits_pids() const override { return false; }
  std::string describe() const override { return "libvirt domain " + spec_.domain_name; }

 private:
  Status call(std::vector<std::string> args, uint64_t timeout_ms, Answer done, HelperCall** made = nullptr);

  uv_loop_t* loop_;
  LibvirtLauncherSpec spec_;
  // Every call of the job, kept until the launcher goes: a call may be made from inside an
  // earlier one's answer, which must not destroy that one.
  std::vector<std::unique_ptr<HelperCall>> calls_;
  HelperCall* create_ = nullptr;
};

}  // namespace motor::vm
