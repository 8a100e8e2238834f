// What starting a compile-cache fill job needs besides its PendingStart (runner/cache_fill.hpp):
// kept apart so that admission (built for test/core too) needs nothing else of the fills.
#pragma once

#include <string>

namespace motor::runner {

struct FillStart {
  std::string repository_root;  // the caller's path of the repository
  std::string tip_commit;       // the verified default-branch tip the caller reported
  std::string source_commit;    // the mirror's commit of that tree (the workspace's prepared commit)
  std::string mirror;           // host path of the mirror holding source_commit
};

}  // namespace motor::runner
