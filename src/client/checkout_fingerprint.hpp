// "Unchanged since the last sync", decided in-process (issue 20): a `motor run` in a checkout
// nobody touched since its last sync starts no git process at all.
//
// After a sync the client keeps a stat fingerprint of the checkout: every file of the synced tree
// with the stat data git recorded for it in the private index (mode, size, mtime, ctime, inode),
// every directory of the work tree but `.git` (a new or removed file changes its directory's
// mtime and ctime), and the git configuration and exclude files that decide what is ignored.
// The next run compares them with lstat: one difference and the full sync runs. Racy-git rule:
// the fingerprint is only kept when every file's and directory's mtime and ctime lie before a
// filesystem timestamp taken before the walk (so a change in the same clock tick as the sync is
// never hidden); ctime catches an edit that restores the mtime (`touch -r`, `cp -p`).
// With a checkout watcher (checkout_watch.hpp), the fingerprint also names the watcher's answer
// read before its stat data was: while the same watcher gives the same answer, nothing changed
// and no file is looked at (only git's config files).
// Anything unusual (GIT_* variables, gitlinks, assume-unchanged entries, a configured excludes or
// attributes file, fsmonitor, a .git file instead of a directory) means no fingerprint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/checkout_watch.hpp"
#include "motor/expected.hpp"

namespace motor::client {

struct FsTime {
  int64_t sec = 0, nsec = 0;
  bool operator<(const FsTime& o) const { return sec < o.sec || (sec == o.sec && nsec < o.nsec); }
  bool operator==(const FsTime&) const = default;
};

struct StatRecord {
  uint32_t mode = 0;
  uint64_t size = 0, ino = 0;
  FsTime mtime, ctime;
  bool operator==(const StatRecord&) const = default;
};

// Git's config and exclude files (git_config_files) with their stat data; nullopt = absent.
using ConfigRecords = std::vector<std::pair<std::string, std::optional<StatRecord>>>;

// Taken before `git add`: the reference time and the directories and config files as they were.
struct FingerprintStart {
  FsTime reference;
  std::vector<std::pair<std::string, StatRecord>> dirs;     // relative to the root ("" = the root)
  ConfigRecords config;
  std::optional<WatchState> watch;  // the watcher's answer, read before anything else
  bool usable = false;
};

// FNV-1a of a path: the client's stable names for cache repositories, keys and fingerprints.
uint64_t path_hash(std::string_view s);

// Where the fingerprint of the checkout at `root` is kept (in the client's cache).
std::string fingerprint_path(const std::string& cache_base, const std::string& root);

// The config and exclude files git reads for this checkout (absolute paths).
std::vector<std::string> git_config_files(const std::string& git_dir);

// Those files as they are now; nullopt when one cannot be looked at (other than absent).
std::optional<ConfigRecords> config_records(const std::string& git_dir);

// Before the sync's `git add`. `reference_dir`: a writable directory on which a file is made to
// read the filesystem's clock.
FingerprintStart begin_fingerprint(const std::string& root, const std::string& git_dir, const std::string& reference_dir);

// After a successful sync to `tree`: writes the fingerprint from `start` and the private index git
// wrote, if every rule holds (otherwise any old one stays: it names its own tree and stat data).
void save_fingerprint(const std::string& path, const std::string& root, const std::string& tree,
                      const std::string& private_index, const FingerprintStart& start);

// How unchanged_tree vouched for a tree.
enum class Vouched { kNot, kByWatcher, kByStats };

// The tree of the last sync if nothing in the checkout changed since; nullopt otherwise. With
// `watch` (the watcher's answer, read before this call looked at anything): if it is the one the
// fingerprint names, only git's config files are looked at; if not and every stat still matches,
// the fingerprint is made to name it, for the next run.
std::optional<std::string> unchanged_tree(const std::string& path, const std::string& root,
                                          const std::optional<WatchState>& watch = std::nullopt, Vouched* how = nullptr);

// The files of a git index (versions 2-4): path and the stat data git recorded. nullopt when it
// cannot be read, or holds what the fingerprint cannot vouch for (gitlinks, assume-unchanged or
// skip-worktree entries, unmerged stages).
std::optional<std::vector<std::pair<std::string, StatRecord>>> read_index_entries(const std::string& index_path);

}  // namespace motor::client
