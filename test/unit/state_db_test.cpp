// state.db (the job table in SQLite): a torn write leaves the last whole commit, a database of
// a newer schema or of another program is refused with a reason, a corrupt one names its file,
// and a state.json is migrated once.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/sqlite.hpp"
#include "runner/state_store.hpp"
#include "temp_dir.hpp"

namespace motor::runner {
namespace {

namespace fs = std::filesystem;

PersistedJob job(const std::string& id, JobState state) {
  PersistedJob j;
  j.job_id = id;
  j.caller = "alice";
  j.workspace_key = "default";
  j.summary = "true";
  j.state = state;
  j.created_at_ms = 1;
  if (state == JobState::kFinished) j.terminal_json = R"({"type":"terminal","job_id":")" + id + R"("})";
  return j;
}

std::string change_of(const std::vector<PersistedJob>& jobs, bool draining = false) {
  std::vector<std::string> rows;
  for (const auto& j : jobs) rows.push_back(encode_job(j));
  return join_changes({encode_change(draining, rows, {})});
}

std::vector<std::string> ids(const PersistedState& st) {
  std::vector<std::string> out;
  for (const auto& j : st.jobs) out.push_back(j.job_id);
  return out;
}

off_t size_of(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

class StateDbTest : public test::TempDirTest {
 protected:
};

// A crash while a transaction's frames were being written (power lost mid-write): what is on
// disk is the database, the WAL up to the last commit, and part of the next one. Its torn frames
// fail their checksums and the table is as of the last whole commit.
TEST_F(StateDbTest, ATornWriteLeavesTheLastWholeCommit) {
  auto db = StateDb::open(dir_);
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto first = decode_changes(change_of({job("a", JobState::kRunning)}));
  ASSERT_TRUE(db->apply(*first).ok());
  const off_t after_first = size_of(dir_ + "/state.db-wal");
  ASSERT_GT(after_first, 0) << "no WAL: is the table in WAL mode?";
  auto second = decode_changes(change_of({job("a", JobState::kFinished), job("b", JobState::kQueued)}, true));
  ASSERT_TRUE(db->apply(*second).ok());
  const off_t after_second = size_of(dir_ + "/state.db-wal");
  ASSERT_GT(after_second, after_first);
  // The files as a crash would leave them (copied while the connection is open: nothing checkpointed).
  const std::string crashed = dir_ + "/crashed";
  fs::create_directory(crashed);
  for (const char* name : {"state.db", "state.db-wal"}) fs::copy_file(dir_ + "/" + name, crashed + "/" + name);
  for (const bool garbage : {false, true}) {
    const std::string torn = crashed + (garbage ? "/garbage" : "/cut");
    fs::create_directory(torn);
    for (const char* name : {"state.db", "state.db-wal"}) fs::copy_file(crashed + "/" + name, torn + "/" + name);
    const off_t middle = after_first + (after_second - after_first) / 2;
    if (garbage) {
      // The second commit's frames half overwritten by junk (a write torn across sectors).
      std::fstream f(torn + "/state.db-wal", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(middle);
      f << std::string(static_cast<size_t>(after_second - middle), '\x5a');
    } else {
      ASSERT_EQ(truncate((torn + "/state.db-wal").c_str(), middle), 0);
    }
    auto st = load_state(torn);
    ASSERT_TRUE(st.ok()) << st.error().message;
    EXPECT_FALSE(st->draining) << (garbage ? "garbage" : "cut");
    ASSERT_EQ(ids(*st), (std::vector<std::string>{"a"})) << (garbage ? "garbage" : "cut");
    EXPECT_EQ(st->jobs[0].state, JobState::kRunning);
  }
  // And untorn, both commits are there.
  auto whole = load_state(crashed);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(ids(*whole), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(whole->draining);
}

TEST_F(StateDbTest, ADatabaseOfANewerSchemaIsRefusedWithAReason) {
  { ASSERT_TRUE(StateDb::open(dir_).ok()); }
  {
    auto raw = SqliteDb::open(dir_ + "/state.db", false);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(raw->exec("PRAGMA user_version = 7").ok());
  }
  auto st = load_state(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "state");
  EXPECT_NE(st.error().message.find("schema version 7"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("reads version 1"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("newer motor-runner"), std::string::npos) << st.error().message;
}

TEST_F(StateDbTest, AnotherProgramsDatabaseIsRefused) {
  {
    auto raw = SqliteDb::open(dir_ + "/state.db", true);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(raw->exec("CREATE TABLE t (x)").ok());
  }
  auto st = load_state(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("not a motor-runner state database"), std::string::npos) << st.error().message;
}

TEST_F(StateDbTest, ACorruptDatabaseIsAnErrorNamingIt) {
  { std::ofstream(dir_ + "/state.db") << std::string(8192, 'x'); }
  auto st = load_state(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find(dir_ + "/state.db"), std::string::npos) << st.error().message;
}

// An upgraded host: the older runner's state.json becomes the table once, then moves aside.
TEST_F(StateDbTest, AStateJsonIsMigratedOnceAndMovedAside) {
  PersistedState old;
  old.draining = true;
  old.jobs = {job("0a", JobState::kFinished), job("0b", JobState::kRunning)};
  old.jobs[1].cgroup = "job-0b";
  old.jobs[1].secret_sha256 = std::string(64, 'f');
  { std::ofstream(dir_ + "/state.json") << encode_state(old); }
  auto st = load_state(dir_);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_TRUE(st->draining);
  ASSERT_EQ(ids(*st), (std::vector<std::string>{"0a", "0b"}));
  EXPECT_EQ(st->jobs[0].terminal_json, old.jobs[0].terminal_json);
  EXPECT_EQ(st->jobs[1].cgroup, "job-0b");
  EXPECT_EQ(st->jobs[1].secret_sha256, old.jobs[1].secret_sha256);
  EXPECT_NE(access((dir_ + "/state.json").c_str(), F_OK), 0);
  EXPECT_EQ(access((dir_ + "/state.json.migrated").c_str(), F_OK), 0);
  // Read again: from the table, the same.
  ASSERT_TRUE(apply_changes_now(dir_, change_of({job("0c", JobState::kQueued)}, true)).ok());
  auto again = load_state(dir_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ids(*again), (std::vector<std::string>{"0a", "0b", "0c"}));
}

// A crash after the migration's commit and before its rename finds both: the same state.json
// replaces the table again (not merged into it), and the result is the same.
TEST_F(StateDbTest, AStateJsonFoundBesideATableReplacesIt) {
  ASSERT_TRUE(apply_changes_now(dir_, change_of({job("zz", JobState::kRunning)})).ok());
  PersistedState old;
  old.jobs = {job("0a", JobState::kFinished)};
  { std::ofstream(dir_ + "/state.json") << encode_state(old); }
  auto st = load_state(dir_);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(ids(*st), (std::vector<std::string>{"0a"}));
}

TEST_F(StateDbTest, ACorruptStateJsonIsNotMigratedAndTheTableIsKept) {
  ASSERT_TRUE(apply_changes_now(dir_, change_of({job("zz", JobState::kRunning)})).ok());
  { std::ofstream(dir_ + "/state.json") << "{\"version\":1,\"jobs\":["; }
  auto st = load_state(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("state.json"), std::string::npos) << st.error().message;
  fs::remove(dir_ + "/state.json");
  auto kept = load_state(dir_);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(ids(*kept), (std::vector<std::string>{"zz"}));
}

}  // namespace
}  // namespace motor::runner
