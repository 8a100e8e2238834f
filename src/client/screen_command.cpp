#include "client/screen_command.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "client/git_process.hpp"
#include "motor/fd_io.hpp"
#include "motor/unique_fd.hpp"
#include "screen/screen.hpp"

namespace motor::client {
namespace {

constexpr size_t kMaxDiffBytes = size_t{256} << 20;

// git reads no attributes or config of the system that could change its answers (textconv and
// external diff drivers are never run by plumbing anyway; said again on the command line).
const std::vector<std::string> kGitEnv = {"GIT_ATTR_NOSYSTEM=1", "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
                                          "GIT_NO_REPLACE_OBJECTS=1"};

Expected<std::string> read_all(int fd, const std::string& what) {
  std::string data;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{"io", fmt::format("reading {}: {}", what, std::strerror(errno))};
    if (n == 0) return data;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > kMaxDiffBytes) return Error{"io", fmt::format("{} is over {} MiB", what, kMaxDiffBytes >> 20)};
  }
}

Expected<std::string> read_change(const ScreenRequest& r) {
  if (r.from_stdin) return read_all(STDIN_FILENO, "stdin");
  if (r.diff_file) {
    UniqueFd fd(::open(r.diff_file->c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return Error{"io", fmt::format("cannot read {}: {}", *r.diff_file, std::strerror(errno))};
    return read_all(fd.get(), *r.diff_file);
  }
  const auto dots = r.range.find("..");
  const std::string base = r.range.substr(0, dots), head = dots == std::string::npos ? "" : r.range.substr(dots + 2);
  if (dots == std::string::npos || base.empty() || head.empty() || head.find("..") != std::string::npos ||
      base[0] == '-' || head[0] == '-') {
    return Error{"usage", fmt::format("expected BASE..HEAD (two revisions), got \"{}\"", r.range)};
  }
  auto run = git({"-c", "core.attributesFile=/dev/null", "-c", "diff.renameLimit=10000", "diff-tree", "-r", "-z",
                  "--raw", "--numstat", "-M", "--no-ext-diff", "--no-textconv", base, head},
                 kGitEnv);
  if (!run) return run.error();
  if (run->status != 0) {
    std::string err = run->err;
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return Error{"git", fmt::format("git diff-tree {} {} failed: {}", base, head, err)};
  }
  return std::move(run->out);
}

void print(bool to_stdout, const std::string& text) {
  (void)motor::write_all(to_stdout ? STDOUT_FILENO : STDERR_FILENO, text.data(), text.size());
}

}  // namespace

int screen_usage_error(const std::string& message, bool json) {
  print(true, json ? screen::render_error_json(message) : screen::render_error_text(message));
  return kScreenError;
}

int run_screen(const ScreenRequest& r) {
  auto fail = [&](const Error& e) { return screen_usage_error(e.message, r.json); };
  auto diff = read_change(r);
  if (!diff) return fail(diff.error());
  auto files = screen::parse_git_diff(*diff);
  if (!files) return fail(files.error());
  // The first bytes of the blobs the verdict still depends on, from the object store of the
  // checkout we are in; without one (or a blob it lacks) those files are `unreadable`.
  screen::BlobHeads heads;
  const auto ids = screen::blobs_to_read(*files);
  if (!ids.empty()) {
    auto cat = git({"cat-file", "--batch"}, kGitEnv, GitIo{.input = screen::cat_file_request(ids), .out_fd = -1, .wait = true});
    if (cat && cat->status == 0) {
      auto parsed = screen::parse_cat_file_batch(cat->out, ids);
      if (!parsed) return fail(parsed.error());
      heads = std::move(*parsed);
    }
  }
  const auto result = screen::decide(*files, heads);
  print(true, r.json ? screen::render_json(result) : screen::render_text(result));
  return result.verdict == screen::Verdict::kMayExecute ? kScreenMayExecute : kScreenDoNotExecute;
}

}  // namespace motor::client
