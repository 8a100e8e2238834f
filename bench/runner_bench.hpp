// The start every benchmark of a real runner shares (motor_bench_loop, motor_bench_cancel): its
// rounds argument, the root check (the runner creates cgroups and switches accounts), and the
// start of a runner whose log is shown when it does not start.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "support/runner_harness.hpp"

namespace motor::bench {

// The rounds to run (argv[1], else `fallback`), or nothing when the bench cannot run here.
inline std::optional<int> rounds_to_run(int argc, char** argv, int fallback) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : fallback;
  if (rounds <= 0) {
    fmt::print(stderr, "bench: the number of rounds must be a positive number\n");
    return std::nullopt;
  }
  if (geteuid() != 0) {
    fmt::print(stderr, "bench: run as root (the runner creates cgroups and switches accounts)\n");
    return std::nullopt;
  }
  return rounds;
}

// Starts `runner`; false, with its log on stderr, when it did not start.
inline bool start_runner(test::RunnerProcess& runner, std::string_view which = "the runner") {
  if (runner.start()) return true;
  fmt::print(stderr, "bench: {} did not start:\n{}\n", which, runner.log());
  return false;
}

}  // namespace motor::bench
