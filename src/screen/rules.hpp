// The change screen's rules (issue 24, docs/change-screen.md): ONE reviewed table, a reason per
// row. A path is classified by the first row that matches it; the table is an allow-list at
// heart: only the rows marked kMayExecute let a file through, and a path no row names is
// "unknown", which does not. Property rows (symlink, mode, binary, shebang, ...) are judged by
// screen.cpp from what git says about the file; they are listed here so the table is complete.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace motor::screen {

enum class Verdict { kMayExecute, kDoNotExecute };

enum class Match {
  kProperty,    // not a name pattern: what git says about the file (mode, content, status)
  kComponent,   // any directory component of the path equals a pattern (".github")
  kName,        // the file name equals a pattern ("Cargo.toml")
  kNamePrefix,  // the file name starts with a pattern ("requirements")
  kExtension,   // the file name ends with a pattern (".rs")
  kAnyPath,     // every path: the last row (fail closed)
};

struct Rule {
  std::string_view id;  // stable, in --json output and tests
  Verdict verdict;
  Match match;
  std::span<const std::string_view> patterns;  // compared case-insensitively (ASCII)
  std::string_view reason;
};

// The whole table, in the order rows are tried. Property rows come first (screen.cpp checks them
// before names), then name rows that refuse, then the allow-list, then `unknown`.
std::span<const Rule> rules();

// The row with this id (every id screen.cpp uses exists: a unit test checks).
const Rule& rule(std::string_view id);

// The first name row (not a property row) that matches `path` (git's path, '/'-separated).
const Rule& classify_path(std::string_view path);

// The table as the Markdown docs/change-screen.md holds between its markers.
std::string rules_markdown();

}  // namespace motor::screen
