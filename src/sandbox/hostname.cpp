#include "sandbox/hostname.hpp"

#include <unistd.h>

#include <cerrno>

namespace motor::sandbox {

Status validate_hostname(const std::string& name) {
  if (name.empty() || name.size() > 63) return make_error("config", "sandbox hostname must be 1..63 bytes");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) return make_error("config", "sandbox hostname may hold only letters, digits, '-' and '.'");
  }
  return {};
}

int apply_hostname(const std::string& name, const char*& stage) {
  if (sethostname(name.data(), name.size()) != 0) {
    stage = "sethostname";
    return errno;
  }
  static constexpr char kDomain[] = "(none)";
  if (setdomainname(kDomain, sizeof(kDomain) - 1) != 0) {
    stage = "setdomainname";
    return errno;
  }
  return 0;
}

}  // namespace motor::sandbox
