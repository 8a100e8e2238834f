// "Nothing in this workspace changed since time M", decided from inode change times alone
// (issue 20: the no-change run). The kernel sets an inode's ctime on every change of its data or
// metadata (write, truncate, chmod, chown, xattrs, utimes, link count, rename) and of a
// directory's entries (create, unlink, rename in or out); no process can set it to a chosen value
// short of stepping the system clock (CAP_SYS_TIME, which no job holds). And the filesystem's
// timestamps never go backwards across inodes (the coarse clock is monotonic; the multigrain
// timestamps of Linux 6.13+ keep a floor): a change made after a stamp M taken from the same
// filesystem gets a ctime >= M. So if every inode reachable from the root, walked without
// following symlinks, has a ctime < M, the tree is exactly what it was at M. A ctime equal to M
// (the same clock tick) is never taken as unchanged.
//
// Pure: files and threads only, no loop; unit-tested without root.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "motor/expected.hpp"

namespace motor::workspace {

struct FsStamp {
  int64_t sec = 0, nsec = 0;
  dev_t dev = 0;  // the filesystem the stamp was read from
  bool operator<(const FsStamp& o) const { return sec < o.sec || (sec == o.sec && nsec < o.nsec); }
};

// The filesystem's clock now: sets `marker`'s times to the current time (creating it 0600 if
// needed) and returns its ctime, as the filesystem recorded it (its own granularity).
Expected<FsStamp> filesystem_now(const std::string& marker);

struct WalkLimits {
  size_t max_entries = 500000;  // past this the walk gives up (the caller scans in full)
  int threads = 2;
};

struct WalkVerdict {
  bool unchanged = false;
  std::string reason;  // why not, for the log ("" when unchanged)
  size_t entries = 0;  // inodes looked at
};

// Walks `root` (a directory; never follows a symlink, never leaves root's filesystem) and checks
// every inode's ctime against `since`, which must come from the same filesystem (its st_dev; a
// finer-grained clock elsewhere could hide a change). The directories in `skip` (paths relative to
// root, no trailing '/') are looked at themselves but not entered. Stops at the first inode that
// changed.
WalkVerdict unchanged_since(const std::string& root, const std::set<std::string>& skip, const FsStamp& since,
                            const WalkLimits& limits = {});

}  // namespace motor::workspace
