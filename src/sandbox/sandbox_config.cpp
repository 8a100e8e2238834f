#include "sandbox/sandbox_config.hpp"

namespace motor::sandbox {

std::vector<ToolchainPath> default_toolchain_paths() {
  return {
      {"/usr", false},
      {"/bin", true},
      {"/sbin", true},
      {"/lib", true},
      {"/lib32", true},
      {"/lib64", true},
      {"/libx32", true},
      {"/etc/alternatives", true},
      {"/etc/ld.so.cache", true},
      {"/etc/ld.so.conf", true},
      {"/etc/ld.so.conf.d", true},
      {"/etc/ssl", true},
      {"/etc/ca-certificates", true},
      {"/etc/localtime", true},
      {"/etc/services", true},
      {"/etc/protocols", true},
  };
}

const BindMount* first_idmapped_bind(const SandboxConfig& config) {
  if (config.workspace.idmap) return &config.workspace;
  for (const auto* list : {&config.writable, &config.read_only, &config.overlaid}) {
    for (const BindMount& b : *list) {
      if (b.idmap) return &b;
    }
  }
  return nullptr;
}

}  // namespace motor::sandbox
