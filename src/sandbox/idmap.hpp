// Idmapped bind mounts (mount_setattr MOUNT_ATTR_IDMAP): a tree owned by one account shown, read
// only, as owned by another, without changing a byte on disk. The dependency preparation of a VM
// job (motor-prep) reads the workspace (motor-job's, mode 0700) this way: it sees the files as its
// own, and cannot write them (the bind is read-only).
#pragma once

#include <sys/types.h>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"

namespace motor::sandbox {

struct IdMap {
  uid_t from_uid = 0;  // owner on disk...
  uid_t to_uid = 0;    // ...as seen through the mount
  gid_t from_gid = 0;
  gid_t to_gid = 0;
  bool operator==(const IdMap&) const = default;
};

// A user namespace whose uid_map/gid_map hold exactly `from to 1`: the userns_fd for
// MOUNT_ATTR_IDMAP (other owners appear as the overflow id, 65534). Made by a short-lived child
// (clone with CLONE_NEWUSER | CLONE_VM: no page tables copied) that exits once the namespace is
// open; refused for root on either side.
Expected<UniqueFd> idmap_user_namespace(const IdMap& map);

}  // namespace motor::sandbox
