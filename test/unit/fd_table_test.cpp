// base/fd_table: the kernel's own figure (FDSize in /proc/self/status) after the reservation.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "base/fd_table.hpp"

namespace motor {
namespace {

std::size_t kernel_fd_table_size() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("FDSize:", 0) == 0) return std::stoul(line.substr(7));
  }
  return 0;
}

TEST(FdTable, ReserveGrowsTheTableTheKernelKeeps) {
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  const std::size_t want = std::min<std::size_t>(kernel_fd_table_size() * 4, nofile.rlim_cur);
  ASSERT_GT(want, kernel_fd_table_size()) << "RLIMIT_NOFILE leaves no room to grow the table";
  EXPECT_GE(reserve_fd_table(want), want);
  EXPECT_GE(kernel_fd_table_size(), want);
}

TEST(FdTable, ReserveStopsAtTheOpenFileLimit) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a limit of its own, in a process of its own
    rlimit small{256, 256};
    if (setrlimit(RLIMIT_NOFILE, &small) != 0) _exit(2);
    _exit(reserve_fd_table(1 << 20) == 256 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace motor
