#include "workspace/change_screen.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <memory>

#include <fmt/format.h>

#include "motor/sys_error.hpp"
#include "motor/unique_fd.hpp"
#include "workspace/child_process.hpp"

namespace motor::workspace {
namespace {

// git as the mirror account under an address-space limit; small pack windows keep git inside
// it on a large mirror.
ChildSpec git_spec(const MirrorScreen& s, std::vector<std::string> args) {
  ChildSpec spec;
  spec.file = "/bin/sh";
  spec.argv = {"/bin/sh", "-c", fmt::format("ulimit -v {} || exit 125; exec \"$@\"", kScreenAddressSpaceKiB), "motor-screen",
               s.git, "--git-dir=" + s.mirror, "-c", "core.packedGitWindowSize=16m", "-c", "core.packedGitLimit=128m",
               "-c", "core.deltaBaseCacheLimit=16m", "-c", "core.attributesFile=/dev/null"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = s.env;
  spec.uid = s.uid;
  spec.gid = s.gid;
  spec.timeout_ms = kScreenTimeoutMs;
  spec.max_stdout_bytes = kScreenMaxOutputBytes;
  return spec;
}

Status failed(const std::string& what, const ChildResult& r) {
  if (r.ok() && !r.stdout_truncated) return {};
  return make_error("screen_refused", fmt::format("the change screen could not read the change ({}: {})", what,
                                                  r.stdout_truncated ? "more output than the screen reads" : r.describe()));
}

}  // namespace

void screen_in_mirror(uv_loop_t* loop, MirrorScreen spec, std::function<void(Expected<screen::Result>)> done) {
  auto s = std::make_shared<MirrorScreen>(std::move(spec));
  ChildSpec diff = git_spec(*s, {"diff-tree", "-r", "-z", "--raw", "--numstat", "-M", "-l10000", "--no-ext-diff",
                                 "--no-textconv", s->base, s->change});
  run_child(loop, std::move(diff), [loop, s, done = std::move(done)](ChildResult r) mutable {
    if (auto st = failed("git diff-tree", r); !st) return done(st.error());
    auto files = screen::parse_git_diff(r.out);
    if (!files) return done(make_error("screen_refused", "the change screen could not read the change: " + files.error().message));
    const auto ids = screen::blobs_to_read(*files);
    if (ids.empty()) return done(screen::decide(*files, {}));
    // The ids go to cat-file's stdin from a memfd: nothing to write while it runs.
    auto input = std::make_shared<UniqueFd>(memfd_create("motor-screen-ids", MFD_CLOEXEC));
    const std::string request = screen::cat_file_request(ids);
    if (!*input || ::write(input->get(), request.data(), request.size()) != static_cast<ssize_t>(request.size()) ||
        ::lseek(input->get(), 0, SEEK_SET) != 0) {
      return done(sys_error("the change screen's blob list"));
    }
    ChildSpec cat = git_spec(*s, {"cat-file", "--batch"});
    cat.stdin_fd = input->get();
    run_child(loop, std::move(cat), [input, ids, files = std::move(*files), done = std::move(done)](ChildResult c) mutable {
      if (auto st = failed("git cat-file", c); !st) return done(st.error());
      auto heads = screen::parse_cat_file_batch(c.out, ids);
      if (!heads) return done(make_error("screen_refused", "the change screen could not read the change: " + heads.error().message));
      done(screen::decide(files, *heads));
    });
  });
}

}  // namespace motor::workspace
