// state.json: encode/decode, atomic save, and loading a missing or corrupt file.
#include "runner/state_store.hpp"

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

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/motor-state-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
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

TEST_F(StateStoreTest, SaveThenLoad) {
  ASSERT_TRUE(save_state(dir_, sample()).ok());
  auto back = load_state(dir_);
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same(*back, sample());
}

TEST_F(StateStoreTest, SaveIsAtomicAndPrivate) {
  ASSERT_TRUE(save_state(dir_, sample()).ok());
  PersistedState second = sample();
  second.draining = false;
  second.jobs.pop_back();
  ASSERT_TRUE(save_state(dir_, second).ok());
  // Only state.json: the temporary file was renamed over it, not left behind.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"state.json"}));
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/state.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto back = load_state(dir_);
  ASSERT_TRUE(back.ok());
  expect_same(*back, second);
}

TEST_F(StateStoreTest, SaveIsNotDisturbedByAStaleTemporaryFile) {
  // A crash mid-save leaves a temp file beside state.json; the next save neither reads nor
  // trips over it, and leaves no temp file of its own.
  { std::ofstream(dir_ + "/.state.json.AAAAAA") << "garbage from a crash"; }
  ASSERT_TRUE(save_state(dir_, sample()).ok());
  size_t temps = 0;
  for (const auto& e : fs::directory_iterator(dir_)) temps += e.path().filename().string().rfind(".state.json.", 0) == 0;
  EXPECT_EQ(temps, 1u);  // only the stale one
  EXPECT_TRUE(load_state(dir_).ok());
}

TEST_F(StateStoreTest, InterruptedSavesAreRemovedAndNothingElse) {
  ASSERT_TRUE(save_state(dir_, sample()).ok());
  for (const char* name : {".state.json.AAAAAA", ".state.json.x1Y2z3", ".state.json.short", "state.json.AAAAAA", "other"}) {
    std::ofstream(dir_ + "/" + name) << "x";
  }
  remove_interrupted_saves(dir_);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".state.json.short", "other", "state.json", "state.json.AAAAAA"}));
  EXPECT_TRUE(load_state(dir_).ok());
}

TEST_F(StateStoreTest, SaveIntoAMissingDirectoryFails) {
  auto s = save_state(dir_ + "/missing", sample());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("state.json"), std::string::npos) << s.error().message;
}

TEST_F(StateStoreTest, MissingFileIsAnEmptyState) {
  auto st = load_state(dir_);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_FALSE(st->draining);
  EXPECT_TRUE(st->jobs.empty());
}

TEST_F(StateStoreTest, CorruptFileIsAnErrorNamingIt) {
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
