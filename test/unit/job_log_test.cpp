// A job's on-disk history: records numbered from 1, cursors, rotation that drops the oldest
// segment (and tells lagging readers), and reopening after a restart with a torn tail.
#include "runner/job_log.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace motor::runner {
namespace {

namespace fs = std::filesystem;

class JobLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/motor-job-log-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/job";
  }
  void TearDown() override { fs::remove_all(root_); }

  JobLog create(int64_t max_bytes = 0) {
    auto log = JobLog::create(dir_, max_bytes);
    EXPECT_TRUE(log.ok()) << (log.ok() ? "" : log.error().message);
    return std::move(*log);
  }

  struct Read {
    int64_t seq;
    JobLog::Kind kind;
    std::string payload;
    std::optional<int64_t> truncated_before_seq;
  };
  // Reads from the cursor to the end.
  std::vector<Read> read_all(const JobLog& log, JobLog::Cursor& c) {
    std::vector<Read> out;
    std::string scratch;
    for (;;) {
      auto e = log.read(c, scratch);
      EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
      if (!e.ok() || !*e) break;
      out.push_back({(*e)->seq, (*e)->kind, std::string((*e)->payload), (*e)->truncated_before_seq});
    }
    return out;
  }
  std::vector<Read> read_from(const JobLog& log, int64_t seq) {
    auto c = log.cursor_at(seq);
    EXPECT_TRUE(c.ok());
    return c.ok() ? read_all(log, *c) : std::vector<Read>{};
  }
  std::vector<std::string> segment_files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("log.", 0) == 0) names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  static std::string payload(int64_t seq) {
    // 95 bytes: with the 5-byte header, each record is 100 bytes on disk.
    std::string p = "record " + std::to_string(seq) + " ";
    p.resize(95, '.');
    return p;
  }

  std::string root_, dir_;
};

TEST_F(JobLogTest, CreateMakesAPrivateDirectory) {
  JobLog log = create();
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(log.dir(), dir_);
  EXPECT_EQ(log.last_seq(), 0);
  EXPECT_EQ(log.first_kept_seq(), 1);
  EXPECT_EQ(segment_files(), (std::vector<std::string>{"log.0"}));
}

TEST_F(JobLogTest, AppendNumbersFromOneAndReadsInOrder) {
  JobLog log = create();
  auto s1 = log.append(JobLog::Kind::kRecord, R"({"type":"started","seq":1})");
  auto s2 = log.append(JobLog::Kind::kStdout, "hello\n");
  auto s3 = log.append(JobLog::Kind::kStderr, std::string("\0\xff", 2));
  auto s4 = log.append(JobLog::Kind::kStdout, "");
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok() && s4.ok());
  EXPECT_EQ(*s1, 1);
  EXPECT_EQ(*s2, 2);
  EXPECT_EQ(*s3, 3);
  EXPECT_EQ(*s4, 4);
  EXPECT_EQ(log.last_seq(), 4);

  const auto all = read_from(log, 1);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].seq, 1);
  EXPECT_EQ(all[0].kind, JobLog::Kind::kRecord);
  EXPECT_EQ(all[0].payload, R"({"type":"started","seq":1})");
  EXPECT_EQ(all[1].seq, 2);
  EXPECT_EQ(all[1].kind, JobLog::Kind::kStdout);
  EXPECT_EQ(all[1].payload, "hello\n");
  EXPECT_EQ(all[2].seq, 3);
  EXPECT_EQ(all[2].kind, JobLog::Kind::kStderr);
  EXPECT_EQ(all[2].payload, std::string("\0\xff", 2));
  EXPECT_EQ(all[3].seq, 4);
  EXPECT_EQ(all[3].payload, "");
  for (const auto& r : all) EXPECT_FALSE(r.truncated_before_seq.has_value());
}

TEST_F(JobLogTest, ReaderAtTheEndSeesLaterAppends) {
  JobLog log = create();
  ASSERT_TRUE(log.append(JobLog::Kind::kStdout, "a").ok());
  auto c = log.cursor_at(1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(read_all(log, *c).size(), 1u);
  EXPECT_TRUE(read_all(log, *c).empty());  // at the end: nothing, and the cursor stays
  ASSERT_TRUE(log.append(JobLog::Kind::kStdout, "b").ok());
  const auto more = read_all(log, *c);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].seq, 2);
  EXPECT_EQ(more[0].payload, "b");
}

TEST_F(JobLogTest, CursorAt) {
  JobLog log = create();
  for (int i = 1; i <= 10; ++i) ASSERT_EQ(*log.append(JobLog::Kind::kStdout, payload(i)), i);
  for (int64_t from = 1; from <= 10; ++from) {
    auto c = log.cursor_at(from);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->next_seq, from);
    const auto rest = read_all(log, *c);
    ASSERT_EQ(rest.size(), static_cast<size_t>(11 - from));
    EXPECT_EQ(rest.front().seq, from);
    EXPECT_EQ(rest.front().payload, payload(from));
    EXPECT_EQ(rest.back().seq, 10);
  }
  // Past the end: nothing yet.
  EXPECT_TRUE(read_from(log, 11).empty());
  EXPECT_TRUE(read_from(log, 1000).empty());
}

TEST_F(JobLogTest, OversizedRecordIsRefusedAndNothingIsAppended) {
  JobLog log = create();
  auto big = log.append(JobLog::Kind::kStdout, std::string(JobLog::kMaxPayload + 1, 'x'));
  EXPECT_FALSE(big.ok());
  EXPECT_EQ(log.last_seq(), 0);
  auto max = log.append(JobLog::Kind::kStdout, std::string(JobLog::kMaxPayload, 'x'));
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(*max, 1);
  EXPECT_EQ(read_from(log, 1).at(0).payload.size(), JobLog::kMaxPayload);
}

TEST_F(JobLogTest, RotationDropsTheOldestSegment) {
  // Each record is 100 bytes; with 1000 bytes a segment fills at 500 (five records).
  JobLog log = create(1000);
  for (int i = 1; i <= 10; ++i) ASSERT_EQ(*log.append(JobLog::Kind::kStdout, payload(i)), i);
  EXPECT_EQ(segment_files(), (std::vector<std::string>{"log.0", "log.1"}));
  EXPECT_EQ(log.first_kept_seq(), 1);
  ASSERT_EQ(*log.append(JobLog::Kind::kStdout, payload(11)), 11);
  EXPECT_EQ(segment_files(), (std::vector<std::string>{"log.1", "log.2"}));
  EXPECT_EQ(log.first_kept_seq(), 6);
  EXPECT_EQ(log.last_seq(), 11);

  // History is bounded: never more than two segments however much is written.
  for (int i = 12; i <= 200; ++i) ASSERT_EQ(*log.append(JobLog::Kind::kStdout, payload(i)), i);
  EXPECT_EQ(segment_files().size(), 2u);
  uintmax_t bytes = 0;
  for (const auto& n : segment_files()) bytes += fs::file_size(dir_ + "/" + n);
  EXPECT_LE(bytes, 1000u);
  // Segments hold records 191-195 and 196-200.
  EXPECT_EQ(log.first_kept_seq(), 191);

  // What is kept reads back in order.
  const auto kept = read_from(log, log.first_kept_seq());
  ASSERT_EQ(kept.size(), 10u);
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].seq, 191 + static_cast<int64_t>(i));
    EXPECT_EQ(kept[i].payload, payload(kept[i].seq));
  }
}

TEST_F(JobLogTest, CursorAtADroppedSeqStartsAtTheOldestKept) {
  JobLog log = create(1000);
  for (int i = 1; i <= 12; ++i) ASSERT_TRUE(log.append(JobLog::Kind::kStdout, payload(i)).ok());
  ASSERT_EQ(log.first_kept_seq(), 6);
  auto c = log.cursor_at(2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->next_seq, 6);
  const auto rest = read_all(log, *c);
  ASSERT_EQ(rest.size(), 7u);
  EXPECT_EQ(rest.front().seq, 6);
  EXPECT_EQ(rest.front().payload, payload(6));
}

TEST_F(JobLogTest, LaggingReaderLearnsWhatWasDropped) {
  JobLog log = create(1000);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(log.append(JobLog::Kind::kStdout, payload(i)).ok());
  auto c = log.cursor_at(1);
  ASSERT_TRUE(c.ok());
  std::string scratch;
  auto first = log.read(*c, scratch);
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_EQ((*first)->seq, 1);
  // The reader stops; the job writes on until its segment is deleted.
  for (int i = 4; i <= 11; ++i) ASSERT_TRUE(log.append(JobLog::Kind::kStdout, payload(i)).ok());
  ASSERT_EQ(log.first_kept_seq(), 6);
  auto next = log.read(*c, scratch);
  ASSERT_TRUE(next.ok() && *next);
  EXPECT_EQ((*next)->seq, 6);
  EXPECT_EQ((*next)->payload, payload(6));
  EXPECT_EQ((*next)->truncated_before_seq, std::optional<int64_t>(6));
  // Only once: the following records are contiguous again.
  const auto rest = read_all(log, *c);
  ASSERT_EQ(rest.size(), 5u);
  EXPECT_EQ(rest.front().seq, 7);
  EXPECT_EQ(rest.back().seq, 11);
  for (const auto& r : rest) EXPECT_FALSE(r.truncated_before_seq.has_value());
}

TEST_F(JobLogTest, ReaderCrossesSegmentsWithoutGaps) {
  JobLog log = create(1000);
  for (int i = 1; i <= 9; ++i) ASSERT_TRUE(log.append(JobLog::Kind::kStdout, payload(i)).ok());
  const auto all = read_from(log, 1);
  ASSERT_EQ(all.size(), 9u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].seq, static_cast<int64_t>(i) + 1);
}

TEST_F(JobLogTest, OpenAfterCloseRebuildsLastSeq) {
  {
    JobLog log = create();
    for (int i = 1; i <= 7; ++i) ASSERT_TRUE(log.append(JobLog::Kind::kStdout, payload(i)).ok());
  }
  auto reopened = JobLog::open(dir_, 0);
  ASSERT_TRUE(reopened.ok()) << reopened.error().message;
  EXPECT_EQ(reopened->last_seq(), 7);
  EXPECT_EQ(reopened->first_kept_seq(), 1);
  EXPECT_EQ(*reopened->append(JobLog::Kind::kRecord, "{\"type\":\"terminal\"}"), 8);
  const auto all = read_from(*reopened, 1);
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(all[6].payload, payload(7));
  EXPECT_EQ(all[7].kind, JobLog::Kind::kRecord);
}

TEST_F(JobLogTest, OpenCutsATornTail) {
  uintmax_t whole = 0;
  {
    JobLog log = create();
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE(log.append(JobLog::Kind::kStdout, payload(i)).ok());
    whole = fs::file_size(dir_ + "/log.0");
  }
  {
    // The runner died in the middle of a write: a header promising 95 bytes, and 10 of them.
    std::ofstream f(dir_ + "/log.0", std::ios::binary | std::ios::app);
    f.write("\x5f\x00\x00\x00\x01", 5);
    f.write("0123456789", 10);
  }
  ASSERT_EQ(fs::file_size(dir_ + "/log.0"), whole + 15);
  auto reopened = JobLog::open(dir_, 0);
  ASSERT_TRUE(reopened.ok()) << reopened.error().message;
  EXPECT_EQ(reopened->last_seq(), 3);
  EXPECT_EQ(fs::file_size(dir_ + "/log.0"), whole);
  EXPECT_EQ(*reopened->append(JobLog::Kind::kStdout, "after"), 4);
  const auto all = read_from(*reopened, 1);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[2].payload, payload(3));
  EXPECT_EQ(all[3].payload, "after");
}

TEST_F(JobLogTest, OpenCutsATornHeader) {
  {
    JobLog log = create();
    ASSERT_TRUE(log.append(JobLog::Kind::kStdout, "x").ok());
  }
  {
    std::ofstream f(dir_ + "/log.0", std::ios::binary | std::ios::app);
    f.write("\x01\x00", 2);
  }
  auto reopened = JobLog::open(dir_, 0);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->last_seq(), 1);
  EXPECT_EQ(fs::file_size(dir_ + "/log.0"), 6u);
}

TEST_F(JobLogTest, OpenAfterRotationKeepsSeqNumbers) {
  {
    JobLog log = create(1000);
    for (int i = 1; i <= 13; ++i) ASSERT_TRUE(log.append(JobLog::Kind::kStdout, payload(i)).ok());
    ASSERT_EQ(log.first_kept_seq(), 6);
  }
  auto reopened = JobLog::open(dir_, 1000);
  ASSERT_TRUE(reopened.ok()) << reopened.error().message;
  EXPECT_EQ(reopened->first_kept_seq(), 6);
  EXPECT_EQ(reopened->last_seq(), 13);
  const auto kept = read_from(*reopened, 1);
  ASSERT_EQ(kept.size(), 8u);
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].seq, 6 + static_cast<int64_t>(i));
    EXPECT_EQ(kept[i].payload, payload(kept[i].seq));
  }
  EXPECT_EQ(*reopened->append(JobLog::Kind::kStdout, payload(14)), 14);
}

TEST_F(JobLogTest, OpenWithoutSegmentsIsAnError) {
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  auto empty = JobLog::open(dir_, 0);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("no log segments"), std::string::npos);
  auto missing = JobLog::open(root_ + "/nope", 0);
  EXPECT_FALSE(missing.ok());
}

TEST_F(JobLogTest, LastTerminalIsTheLastRecordOnlyIfItIsATerminalRecord) {
  auto log = create();
  EXPECT_FALSE(log.last_terminal());
  ASSERT_TRUE(log.append(JobLog::Kind::kRecord, R"({"type":"started","seq":1})").ok());
  ASSERT_TRUE(log.append(JobLog::Kind::kStdout, R"({"type":"terminal"} as output)").ok());
  EXPECT_FALSE(log.last_terminal());  // output bytes, not a record
  const std::string terminal = R"({"type":"terminal","seq":3})";
  ASSERT_TRUE(log.append(JobLog::Kind::kRecord, terminal).ok());
  EXPECT_EQ(log.last_terminal().value_or(""), terminal);
}

TEST_F(JobLogTest, AReadOnlyOpenForReplayReadsEverythingAndChangesNothing) {
  {
    auto log = create();
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE(log.append(JobLog::Kind::kStdout, payload(i)).ok());
  }
  { std::ofstream(dir_ + "/log.0", std::ios::app) << "\x10\x00"; }  // a torn header
  const auto size = fs::file_size(dir_ + "/log.0");
  auto replay = JobLog::open(dir_, 0, false);
  ASSERT_TRUE(replay.ok()) << replay.error().message;
  EXPECT_EQ(replay->last_seq(), 3);
  EXPECT_EQ(read_from(*replay, 1).size(), 3u);
  EXPECT_EQ(fs::file_size(dir_ + "/log.0"), size);  // nothing cut: only a writable open repairs
  EXPECT_FALSE(replay->append(JobLog::Kind::kStdout, payload(4)).ok());
}

}  // namespace
}  // namespace motor::runner
