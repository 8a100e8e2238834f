// A small Bazel-style action graph through motor-bb-runner, concurrently: four compile actions
// whose input roots share a header hard-linked from one cache file (as bb_worker links inputs
// from its cache), then a link action over their outputs.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>

#include <fmt/format.h>

#include "bbrunner/bb_fixture.hpp"

namespace motor::test {
namespace {

constexpr int kCompiles = 4;

TEST(BbRunnerGraph, ActionsWithSharedInputsRunConcurrently) {
  MOTOR_REQUIRE(geteuid() == 0, "motor-bb-runner's integration tests run real sandboxes as root");
  BbFarm farm("max_running_jobs = 8\n", {"--memory", "128M"});
  ASSERT_TRUE(farm.start()) << farm.runner().log() << farm.bb_log();
  // The worker's file cache: one read-only header every compile action gets as a hard link.
  const std::string cache = farm.build_dir() + "/cache-common.h";
  write_file(cache, "#define COMMON 1\n");
  chmod(cache.c_str(), 0444);

  std::vector<ActionDir> compiles;
  for (int i = 0; i < kCompiles; ++i) {
    compiles.push_back(farm.make_action(fmt::format("compile{}", i), {{fmt::format("src/f{}.c", i), fmt::format("int f{};\n", i)}}));
    mkdir((compiles.back().root() + "/include").c_str(), 0777);
    ASSERT_EQ(link(cache.c_str(), (compiles.back().root() + "/include/common.h").c_str()), 0);
  }
  std::vector<RunOutcome> results(kCompiles);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCompiles; ++i) {
    threads.emplace_back([&, i] {
      // The "compiler" also tries to change its shared input: it must not be able to.
      results[static_cast<size_t>(i)] = farm.run(farm.request(
          compiles[static_cast<size_t>(i)],
          {"/bin/sh", "-c",
           fmt::format("mkdir -p out && cat include/common.h src/f{0}.c > out/f{0}.o && sleep 1; "
                       "echo poisoned >> include/common.h 2>/dev/null; echo compiled f{0}",
                       i)}));
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kCompiles; ++i) {
    const auto& r = results[static_cast<size_t>(i)];
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << farm.bb_log();
    EXPECT_EQ(r.reply.exit_code(), 0);
    EXPECT_EQ(r.stdout_text, fmt::format("compiled f{}\n", i));
    EXPECT_EQ(read_file(compiles[static_cast<size_t>(i)].root() + fmt::format("/out/f{}.o", i)),
              fmt::format("#define COMMON 1\nint f{};\n", i));
  }
  EXPECT_EQ(read_file(cache), "#define COMMON 1\n") << "an action changed a shared input";

  // The link action: bb_worker uploads the outputs and places them in the next input root.
  std::map<std::string, std::string> objects;
  for (int i = 0; i < kCompiles; ++i)
    objects[fmt::format("obj/f{}.o", i)] = read_file(compiles[static_cast<size_t>(i)].root() + fmt::format("/out/f{}.o", i));
  auto link_action = farm.make_action("link", objects);
  auto linked = farm.run(farm.request(link_action, {"/bin/sh", "-c", "cat obj/*.o > app && wc -l < app"}));
  ASSERT_TRUE(linked.status.ok()) << linked.status.error_message();
  EXPECT_EQ(linked.stdout_text, fmt::format("{}\n", 2 * kCompiles));
  EXPECT_EQ(read_file(link_action.root() + "/app").size(), objects.size() * std::string("#define COMMON 1\nint f0;\n").size());
}

}  // namespace
}  // namespace motor::test
