#include "runner/bridge_account.hpp"

#include <pwd.h>

namespace motor::runner {

std::optional<uid_t> bridge_uid() {
  static std::optional<uid_t> cached;
  if (cached) return cached;
  char buf[4096];
  passwd pw{};
  passwd* found = nullptr;
  if (getpwnam_r(kBridgeAccount, &pw, buf, sizeof buf, &found) == 0 && found && found->pw_uid != 0) cached = found->pw_uid;
  return cached;
}

}  // namespace motor::runner
