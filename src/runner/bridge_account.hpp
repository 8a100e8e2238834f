// The SSH bridge account (`motor`, created by scripts/setup): remote callers log in as it, and its
// authorized_keys forced command (`motor-runner connect --caller NAME`) names each of them. The
// runner lets this account, and besides it only root, name callers (docs/remote-callers.md).
#pragma once

#include <sys/types.h>

#include <optional>

namespace motor::runner {

inline constexpr const char* kBridgeAccount = "motor";

// The bridge account's uid; nullopt while it does not exist (looked up again then, and cached
// once found).
std::optional<uid_t> bridge_uid();

}  // namespace motor::runner
