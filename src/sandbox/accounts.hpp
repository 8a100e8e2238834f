// The unprivileged accounts jobs run as, looked up once at start.
#pragma once

#include <sys/types.h>

#include <string>

#include "motor/expected.hpp"

namespace motor::sandbox {

struct Account {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Fails if the account is missing, or is privileged (uid or gid 0, or a member of group 0).
Expected<Account> lookup_unprivileged_account(const std::string& name);

}  // namespace motor::sandbox
