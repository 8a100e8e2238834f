#include "vm/libvirt_launcher.hpp"

#include <fstream>

#include "vm/qemu_confinement.hpp"

namespace motor::vm {

Status LibvirtLauncher::call(std::vector<std::string> args, uint64_t timeout_ms, Answer done, HelperCall** made) {
  auto started = HelperCall::start(loop_, spec_.helper_path, args, timeout_ms, std::move(done));
  if (!started) return started.error();
  if (made) *made = started->get();
  calls_.push_back(std::move(*started));
  return {};
}

Status LibvirtLauncher::create(const DomainSpec& domain, Answer done) {
  const std::string xml_path = spec_.work_dir + "/domain.xml";
  {
    std::ofstream out(xml_path, std::ios::trunc);
    out << domain_xml(domain);
    if (!out) return make_error("vm", "writing " + xml_path);
  }
  return call({"create", spec_.libvirt_uri, xml_path, std::to_string(spec_.hard_limit_bytes)}, 120000, std::move(done),
              &create_);
}

Status LibvirtLauncher::resume(Answer done) {
  return call({"resume", spec_.libvirt_uri, spec_.domain_name}, 60000, std::move(done));
}

Status LibvirtLauncher::destroy(Answer done) {
  return call({"destroy", spec_.libvirt_uri, spec_.domain_name, spec_.work_dir}, 120000, std::move(done));
}

const std::vector<std::string>& LibvirtLauncher::environment_names() const { return libvirt_qemu_environment_names(); }

}  // namespace motor::vm
