#include "sandbox/accounts.hpp"

#include <grp.h>
#include <pwd.h>

#include <fmt/format.h>

#include <vector>

namespace motor::sandbox {

Expected<Account> lookup_unprivileged_account(const std::string& name) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found) {
    return make_error("config", fmt::format("the account \"{}\" does not exist; run scripts/setup (or create it as a "
                                            "system account with no login shell)", name));
  }
  if (pw.pw_uid == 0 || pw.pw_gid == 0) {
    return make_error("config", fmt::format("the account \"{}\" is privileged (uid {} gid {}); jobs never run as root",
                                            name, pw.pw_uid, pw.pw_gid));
  }
  int count = 64;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  if (getgrouplist(name.c_str(), pw.pw_gid, groups.data(), &count) >= 0) {
    for (int i = 0; i < count; ++i) {
      if (groups[static_cast<size_t>(i)] == 0) {
        return make_error("config", fmt::format("the account \"{}\" is in group 0 (root); remove it from that group", name));
      }
    }
  }
  return Account{name, pw.pw_uid, pw.pw_gid};
}

}  // namespace motor::sandbox
