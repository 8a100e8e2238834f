// The scan after a job answers from its baseline when no inode of the workspace changed since the
// last full scan (issue 20: the no-change run; src/workspace/stat_walk.hpp), later ones from the
// change feed a walk started (src/workspace/change_feed.hpp), and every change a job makes is
// still reported exactly: a tracked edit right after the last scan, a new file, a deletion, an
// edit that puts the mtime back, a chmod, a write through a shared mapping, a symlink swapped for
// another target, a write below a directory git ignores as a whole, and the same directory no
// longer ignored.
// Each job runs with --no-sync, so the workspace keeps every earlier job's changes and each report
// holds all of them (the report is against the prepared tree).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/checkout_fixture.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"

namespace motor::test {
namespace {

class RunnerScanBaseline : public CheckoutAndRunner {
 protected:
  std::string checkout_script() const override {
    return "printf 'target/\\n*.log\\ncache/\\n' > .gitignore && mkdir -p src && echo 'fn main() {}' > src/main.rs && "
           "for i in 1 2 3 4 5; do echo line $i > f$i.txt; done && ln -s f5.txt ln";
  }
  std::string extra_config() override { return "log_level = debug\n"; }

  // The terminal record of a job in workspace k (`sync`: the client syncs first).
  std::string job(const std::string& command, bool sync = false) {
    std::vector<std::string> args = {"run"};
    if (!sync) args.push_back("--no-sync");
    for (const char* a : {"-w", "k", "--json", "-c"}) args.emplace_back(a);
    args.push_back(command);
    auto r = runner_->client_in(repo_, args, env_);
    EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.out << r.err;
    const auto at = r.out.find("\"type\":\"terminal\"");
    if (at == std::string::npos) return "<no terminal>";
    const auto line_start = r.out.rfind('\n', at);
    return r.out.substr(line_start == std::string::npos ? 0 : line_start + 1);
  }
  // The strings of a JSON array of plain paths, sorted.
  static std::vector<std::string> paths(const std::string& array) {
    std::vector<std::string> out;
    for (size_t at = array.find('"'); at != std::string::npos; at = array.find('"', at)) {
      const size_t end = array.find('"', at + 1);
      if (end == std::string::npos) break;
      out.push_back(array.substr(at + 1, end - at - 1));
      at = end + 1;
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // The job's workspace_changes are exactly `expected` (the jobs before it included).
  void expect_changes(const std::string& command, std::vector<std::string> expected) {
    const std::string terminal = job(command);
    std::sort(expected.begin(), expected.end());
    ASSERT_EQ(json_field(terminal, "/workspace_changes").front(), '[') << command << "\n" << terminal;
    EXPECT_EQ(paths(json_field(terminal, "/workspace_changes")), expected) << command << "\n" << terminal;
  }
  size_t count_of(const std::string& line) const {
    const std::string log = runner_->log();
    size_t n = 0;
    for (size_t at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++n;
    return n;
  }
  size_t baseline_answers() const { return count_of("scan answered from its baseline"); }
};

TEST_F(RunnerScanBaseline, UnchangedWorkspacesAreAnsweredFromTheBaselineAndEveryChangeIsReported) {
  EXPECT_EQ(json_field(job("true", true), "/workspace_changes"), "[]");
  expect_changes("true", {});
  expect_changes("true", {});
  const size_t quiet = baseline_answers();
  EXPECT_GE(quiet, 1u) << "an unchanged workspace was scanned in full every time\n" << runner_->log();

  std::vector<std::string> changed;
  // Each change is made by the job right at its start: within milliseconds of the last scan's stamp.
  auto step = [&](const std::string& command, std::vector<std::string> adds) {
    changed.insert(changed.end(), adds.begin(), adds.end());
    expect_changes("cd /workspace && " + command, changed);
    // Then jobs that change nothing report the same, the later ones from the baseline.
    expect_changes("true", changed);
    expect_changes("true", changed);
  };
  step("echo more >> f1.txt", {"f1.txt"});
  step("echo n > new.txt", {"new.txt"});
  step("rm f2.txt", {"f2.txt"});
  step("touch -r f3.txt /tmp/stamp && printf 'LINE 3\\n' > f3.txt && touch -r /tmp/stamp f3.txt", {"f3.txt"});
  step("chmod +x f4.txt", {"f4.txt"});
  // A write through a shared mapping: no event of its own, only the close of the file (and the
  // ctime the kernel sets when the page is first written).
  step("python3 -c \"import mmap; f = open('src/main.rs', 'r+b'); m = mmap.mmap(f.fileno(), 0); f.close(); "
       "m[0:2] = b'FN'; m.flush()\"",
       {"src/main.rs"});
  step("ln -sfn f1.txt ln", {"ln"});
  // Below directories git ignores as a whole: not reported (the walk does not enter them) ...
  step("mkdir -p target/d cache/a && echo o > target/d/o && echo x > cache/a/x", {});
  const std::string ignored = json_field(job("true"), "/ignored_writes");
  EXPECT_EQ(ignored, R"({"count":1,"sample_paths":["cache/"]})");
  step("echo y > cache/a/y && echo p > target/d/p", {});
  // ... until the directory is no longer ignored: then everything in it is new.
  step("sed -i /cache/d .gitignore", {".gitignore", "cache/a/x", "cache/a/y"});
  EXPECT_GT(baseline_answers(), quiet + 5) << runner_->log();
  // Half of those without a walk: the change feed started by the walk before heard of nothing.
  EXPECT_GE(count_of("its change feed heard of nothing"), 5u) << runner_->log();
}

}  // namespace
}  // namespace motor::test
