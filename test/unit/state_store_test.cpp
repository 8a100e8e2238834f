// The job table: state.json's codec (the migration's input), the change codec, and state.db
// (changes, load, a missing or corrupt file). Torn writes, schemas and migration: state_db_test.cpp.
#include "runner/state_store.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace motor::runner {
namespace {

namespace fs = std::filesystem;

PersistedState sample() {
  PersistedState st;
  st.draining = true;
  PersistedJob running;
  running.job_id = "01890a5d-ac96-774b-bcce-b302099a8057";
  running.caller = "alice";
  running.workspace_key = "ws-1";
  running.summary = "cargo test \"quoted\" \xE2\x82\xAC";
  running.state = JobState::kRunning;
  running.cgroup = "job-01890a5d";
  running.created_at_ms = 1700000000000;
  running.started_at_ms = 1700000000123;
  PersistedJob finished;
  finished.job_id = "01890a5e-0000-7000-8000-000000000001";
  finished.caller = "bob";
  finished.workspace_key = "default";
  finished.summary = "true";
  finished.state = JobState::kFinished;
  finished.created_at_ms = 1;
  finished.started_at_ms = 2;
  finished.terminal_json = R"({"type":"terminal","job_id":"01890a5e-0000-7000-8000-000000000001","outcome":{"type":"exit","code":0}})";
  st.jobs = {running, finished};
  return st;
}

void expect_same(const PersistedState& a, const PersistedState& b) {
  EXPECT_EQ(a.draining, b.draining);
  ASSERT_EQ(a.jobs.size(), b.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    const auto& x = a.jobs[i];
    const auto& y = b.jobs[i];
    EXPECT_EQ(x.job_id, y.job_id);
    EXPECT_EQ(x.caller, y.caller);
    EXPECT_EQ(x.workspace_key, y.workspace_key);
    EXPECT_EQ(x.summary, y.summary);
    EXPECT_EQ(x.state, y.state);
    EXPECT_EQ(x.cgroup, y.cgroup);
    EXPECT_EQ(x.created_at_ms, y.created_at_ms);
    EXPECT_EQ(x.started_at_ms, y.started_at_ms);
    EXPECT_EQ(x.terminal_json, y.terminal_json);
  }
}

class StateStoreTest : public test::TempDirTest {
 protected:
};

TEST(StateCodec, RoundTrip) {
  const PersistedState st = sample();
  const std::string text = encode_state(st);
  EXPECT_EQ(text.back(), '\n');
  auto back = decode_state(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same(*back, st);
}

TEST(StateCodec, EmptyState) {
  auto back = decode_state(encode_state(PersistedState{}));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->draining);
  EXPECT_TRUE(back->jobs.empty());
}

TEST(StateCodec, TerminalIsStoredAsJsonNotAsAString) {
  const std::string text = encode_state(sample());
  EXPECT_NE(text.find(R"("terminal":{"type":"terminal")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("terminal":null)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("version":1)"), std::string::npos) << text;
}

TEST(StateCodec, Errors) {
  auto not_json = decode_state("{\"jobs\":[");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.error().code, "state");
  EXPECT_NE(not_json.error().message.find("state.json is not valid JSON"), std::string::npos);
  auto no_jobs = decode_state(R"({"version":1,"draining":false})");
  ASSERT_FALSE(no_jobs.ok());
  EXPECT_NE(no_jobs.error().message.find("no \"jobs\" list"), std::string::npos);
  auto no_id = decode_state(R"({"version":1,"jobs":[{"caller":"a"}]})");
  ASSERT_FALSE(no_id.ok());
  EXPECT_NE(no_id.error().message.find("a job without a job_id"), std::string::npos);
}

// Issue 14.14: a state.json of another version is refused, never read as version 1.
TEST(StateCodec, AnotherVersionIsRefused) {
  auto newer = decode_state(R"({"version":99,"draining":false,"jobs":[]})");
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.error().message.find("version 99"), std::string::npos) << newer.error().message;
  EXPECT_NE(newer.error().message.find("reads version 1"), std::string::npos) << newer.error().message;
  auto none = decode_state(R"({"draining":false,"jobs":[]})");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("\"version\""), std::string::npos) << none.error().message;
  auto text = decode_state(R"({"version":"1","jobs":[]})");
  EXPECT_FALSE(text.ok());
  EXPECT_TRUE(decode_state(R"({"version":1,"jobs":[]})").ok());
}

// Every job of `st` as one change, applied to the table in `dir`.
Status save(const std::string& dir, const PersistedState& st, std::vector<std::string> removed = {}) {
  std::vector<std::string> rows;
  for (const auto& j : st.jobs) rows.push_back(encode_job(j));
  return apply_changes_now(dir, join_changes({encode_change(st.draining, rows, removed)}));
}

TEST(StateChangeCodec, RoundTripInOrder) {
  const PersistedState st = sample();
  std::vector<std::string> rows;
  for (const auto& j : st.jobs) rows.push_back(encode_job(j));
  const std::string text = join_changes({encode_change(true, rows, {}), encode_change(false, {}, {"gone"})});
  auto back = decode_changes(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->size(), 2u);
  EXPECT_TRUE((*back)[0].draining);
  PersistedState first;
  first.draining = true;
  first.jobs = (*back)[0].jobs;
  expect_same(first, st);
  EXPECT_FALSE((*back)[1].draining);
  EXPECT_EQ((*back)[1].removed, (std::vector<std::string>{"gone"}));
}

TEST(StateChangeCodec, Errors) {
  EXPECT_FALSE(decode_changes("[{").ok());
  EXPECT_FALSE(decode_changes(R"({"draining":false,"jobs":[],"removed":[]})").ok());  // not a list
  EXPECT_FALSE(decode_changes(R"([{"jobs":[],"removed":[]}])").ok());
  EXPECT_FALSE(decode_changes(R"([{"draining":false,"jobs":[{"caller":"a"}],"removed":[]}])").ok());
  EXPECT_FALSE(decode_changes(R"([{"draining":false,"jobs":[],"removed":[""]}])").ok());
  EXPECT_TRUE(decode_changes("[]").ok());
}

TEST_F(StateStoreTest, ChangesThenLoad) {
  ASSERT_TRUE(save(dir_, sample()).ok());
  auto back = load_state(dir_);
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same(*back, sample());
}

TEST_F(StateStoreTest, AChangeTouchesOnlyItsRowsAndTheFileIsPrivate) {
  ASSERT_TRUE(save(dir_, sample()).ok());
  PersistedState second = sample();
  second.draining = false;
  second.jobs.pop_back();  // the finished job goes; the running one finishes
  second.jobs[0].state = JobState::kFinished;
  second.jobs[0].cgroup = "";
  second.jobs[0].terminal_json = R"({"type":"terminal"})";
  ASSERT_TRUE(save(dir_, second, {sample().jobs[1].job_id}).ok());
  PersistedState third;  // a change with no rows keeps every row
  third.draining = false;
  ASSERT_TRUE(save(dir_, third).ok());
  auto back = load_state(dir_);
  ASSERT_TRUE(back.ok());
  expect_same(*back, second);
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/state.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(StateStoreTest, InterruptedSavesAreRemovedAndNothingElse) {
  for (const char* name : {".state.json.AAAAAA", ".state.json.x1Y2z3", ".state.json.short", "state.json.AAAAAA", "other"}) {
    std::ofstream(dir_ + "/" + name) << "x";
  }
  remove_interrupted_saves(dir_);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".state.json.short", "other", "state.json.AAAAAA"}));
}

TEST_F(StateStoreTest, SaveIntoAMissingDirectoryFails) {
  auto s = save(dir_ + "/missing", sample());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("state.db"), std::string::npos) << s.error().message;
}

TEST_F(StateStoreTest, MissingFileIsAnEmptyState) {
  auto st = load_state(dir_);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_FALSE(st->draining);
  EXPECT_TRUE(st->jobs.empty());
}

TEST_F(StateStoreTest, CorruptJsonFileIsAnErrorNamingIt) {
  { std::ofstream(dir_ + "/state.json") << "{\"draining\":true,\"jobs\":[{\"job_id\":"; }
  auto st = load_state(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "state");
  EXPECT_NE(st.error().message.find(dir_ + "/state.json"), std::string::npos) << st.error().message;
}

TEST_F(StateStoreTest, EmptyFileIsCorrupt) {
  { std::ofstream(dir_ + "/state.json") << ""; }
  auto st = load_state(dir_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("state.json"), std::string::npos);
}

}  // namespace
}  // namespace motor::runner
