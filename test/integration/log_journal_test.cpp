// The log goes to the journal only when JOURNAL_STREAM names stderr's device and inode (issue
// 19): a stale value inherited from a unit's shell must not send every line to nowhere.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/log.hpp"

namespace motor::runner {
namespace {

TEST(LogJournal, OnlyWhenJournalStreamIsStderr) {
  struct stat st {};
  ASSERT_EQ(fstat(STDERR_FILENO, &st), 0);
  const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const std::string stale = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  unsetenv("JOURNAL_STREAM");
  log_init();
  EXPECT_FALSE(log_goes_to_journal());
  setenv("JOURNAL_STREAM", stale.c_str(), 1);
  log_init();
  EXPECT_FALSE(log_goes_to_journal()) << "a JOURNAL_STREAM of another stream was taken";
  setenv("JOURNAL_STREAM", "garbage", 1);
  log_init();
  EXPECT_FALSE(log_goes_to_journal());
  setenv("JOURNAL_STREAM", mine.c_str(), 1);
  log_init();
  EXPECT_TRUE(log_goes_to_journal());
  unsetenv("JOURNAL_STREAM");
  log_init();
}

}  // namespace
}  // namespace motor::runner
