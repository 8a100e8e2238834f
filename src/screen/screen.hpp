// The change screen (issue 24, docs/change-screen.md): may this change be executed at all?
// Pure: it reads what git printed (`git diff-tree -r -z --raw --numstat -M`, or the same from
// `git diff --raw --numstat -z -M`) and the first bytes of blobs (`git cat-file --batch`), and
// judges each file by the table in rules.hpp. Running git is the caller's: `motor screen` runs
// it in a checkout, the runner on its mirror as the unprivileged mirror account.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"
#include "screen/rules.hpp"

namespace motor::screen {

// One file of git's raw output, with its numstat record.
struct ChangedFile {
  char status = 'X';            // A C D M R T U X (git diff --raw)
  int score = -1;               // R/C: git's similarity score (0-100)
  std::string old_mode, new_mode;  // six octal digits as git prints them ("000000" = absent)
  std::string old_id, new_id;      // hex object ids (all zeros = absent or only in a work tree)
  std::string path;                // the path after the change (the removed path for D)
  std::string old_path;            // R/C: the source path
  bool binary = false;             // numstat printed "-\t-"
};

// Parses `--raw --numstat -z` output: every raw record (":<old> <new> <id> <id> <status>\0
// path\0[path\0]"), then one numstat record per raw record, in the same order and naming the
// same paths ("<added>\t<deleted>\t<path>\0", or "...\t\0<src>\0<dst>\0" for R/C). Anything
// else, a missing numstat record, or a path that differs is an error: the input is not what
// git prints, and the screen does not guess.
Expected<std::vector<ChangedFile>> parse_git_diff(std::string_view raw_numstat_z);

// The first bytes of blobs, by the id the diff named them with; an id that is absent was not
// readable.
using BlobHeads = std::map<std::string, std::string>;
inline constexpr size_t kBlobHeadBytes = 2;       // "#!"
inline constexpr size_t kMaxBlobsRead = 900;  // more to read: the rest are `unreadable` (fits a pipe)

// The blob ids whose first bytes the verdict needs: the new side of files that pass every other
// row (a shebang turns them into scripts). At most kMaxBlobsRead.
std::vector<std::string> blobs_to_read(const std::vector<ChangedFile>& files);

// The stdin of `git cat-file --batch` for these ids, and the heads from its output. Output that
// is not what cat-file prints is an error; a "missing" or non-blob object is left out.
std::string cat_file_request(const std::vector<std::string>& ids);
Expected<BlobHeads> parse_cat_file_batch(std::string_view out, const std::vector<std::string>& ids);

struct FileVerdict {
  ChangedFile file;
  const Rule* rule = nullptr;  // the row that decided
  Verdict verdict = Verdict::kDoNotExecute;
};

struct Result {
  Verdict verdict = Verdict::kDoNotExecute;
  std::vector<FileVerdict> files;
  const Rule* summary = nullptr;  // set when the change as a whole decided (empty_change)
};

Result decide(const std::vector<ChangedFile>& files, const BlobHeads& heads);

const char* verdict_text(Verdict v);  // "MAY EXECUTE" / "DO NOT EXECUTE"

// A path as printed: control characters and backslashes escaped (\n, \x1b), so one line is one
// file.
std::string printable_path(std::string_view path);

// The verdict and one line per file, for a terminal.
std::string render_text(const Result& r);
// {"verdict", "may_execute", "reason", "files": [{path, old_path, status, score, old_mode, new_mode,
//  verdict, rule, reason}], "error": null}
std::string render_json(const Result& r);
// An error: the verdict is DO NOT EXECUTE, and the output says so.
std::string render_error_text(std::string_view message);
std::string render_error_json(std::string_view message);
// The verdict and the refusing files' rows on one line, at most `max_bytes` (refusal_detail).
std::string summary_line(const Result& r, size_t max_bytes);

}  // namespace motor::screen
