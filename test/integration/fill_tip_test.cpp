// The caller's check of a compile-cache fill tip (client/fill_tip.hpp, docs/compile-cache.md),
// against a local bare repository as origin: over file:// and over a `git daemon` on 127.0.0.1
// that each test starts and stops by its pid. The clock is the test's, for the 24 h and 60 s rules.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "client/fill_tip.hpp"
#include "motor/unique_fd.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"

extern char** environ;

namespace motor::test {
namespace {

constexpr const char* kGitDaemon = "/usr/lib/git-core/git-daemon";

// A free TCP port on 127.0.0.1 (bound once by the kernel's choice, then released).
int free_port() {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (!s || ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return -1;
  }
  return ntohs(a.sin_port);
}

bool accepts_connections(int port) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return s && ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

// `git daemon` serving `base` on 127.0.0.1, stopped (by its pid) when this goes.
class GitDaemon {
 public:
  explicit GitDaemon(const std::string& base, int port = free_port()) : port_(port) {
    std::vector<std::string> args{kGitDaemon, "--reuseaddr", "--export-all", "--listen=127.0.0.1",
                                  "--port=" + std::to_string(port_), "--base-path=" + base, base};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (port_ <= 0 || posix_spawn(&pid_, kGitDaemon, nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
    for (int i = 0; pid_ > 0 && i < 200 && !accepts_connections(port_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  ~GitDaemon() { stop(); }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  bool running() const { return pid_ > 0 && accepts_connections(port_); }
  int port() const { return port_; }
  std::string url(const std::string& name) const { return "git://127.0.0.1:" + std::to_string(port_) + "/" + name; }

 private:
  int port_;
  pid_t pid_ = -1;
};

enum class Transport { kFileUrl, kDaemonUrl };

// An origin (a bare repository with `main` and `feature`) and a clone of it, in a temp dir; the
// clone's origin URL is file:// or the daemon's.
class FillTip : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(access("/usr/bin/git", X_OK) == 0, "git is installed by scripts/setup");
    MOTOR_REQUIRE(access(kGitDaemon, X_OK) == 0, "git daemon is part of Debian's git package");
    base_ = make_temp_dir();
    sh(base_, git_init_script("seed") + " && git checkout -qb main && echo a > a && git add a && git commit -qm a"
              " && git checkout -qb feature && echo f > f && git add f && git commit -qm f && git checkout -q main"
              " && cd .. && git clone -q --bare seed origin.git && git -C origin.git symbolic-ref HEAD refs/heads/main");
    if (GetParam() == Transport::kDaemonUrl) {
      daemon_ = std::make_unique<GitDaemon>(base_);
      ASSERT_TRUE(daemon_->running()) << "git daemon did not start";
      url_ = daemon_->url("origin.git");
    } else {
      url_ = "file://" + base_ + "/origin.git";
    }
    sh(base_, "git clone -q " + url_ + " clone && cd clone && git config user.name t && git config user.email t@t"
              " && git branch -q feature origin/feature");
    clone_ = base_ + "/clone";
    verifier_ = make_verifier();
  }
  void TearDown() override {
    verifier_.reset();
    daemon_.reset();
    remove_tree(base_);
  }
  std::unique_ptr<client::FillTipVerifier> make_verifier() {
    return std::make_unique<client::FillTipVerifier>(
        base_ + "/store", [this] { return now_; }, [this](const std::string& w) { warnings_.push_back(w); });
  }
  std::string head_of(const std::string& ref) {
    auto out = sh(clone_, "git rev-parse " + ref);
    return out.substr(0, out.find('\n'));
  }
  // The origin stops answering: the daemon stops, or the file:// repository moves away.
  void take_origin_away() {
    if (daemon_) daemon_->stop();
    else sh(base_, "mv origin.git origin-away.git");
  }

  std::string base_, clone_, url_;
  std::unique_ptr<GitDaemon> daemon_;
  std::unique_ptr<client::FillTipVerifier> verifier_;
  int64_t now_ = 1'700'000'000;
  std::vector<std::string> warnings_;
};

TEST_P(FillTip, default_tip_equal_to_origin_is_verified) {
  auto tip = verifier_->verify(clone_);
  ASSERT_TRUE(tip.has_value()) << (warnings_.empty() ? "" : warnings_.front());
  EXPECT_EQ(tip->branch, "main");
  EXPECT_EQ(tip->commit, head_of("main"));
  EXPECT_EQ(verifier_->origin_queries(), 1);
  EXPECT_TRUE(warnings_.empty());
}

TEST_P(FillTip, local_tip_ahead_of_remote_has_no_tip) {
  sh(clone_, "echo b > b && git add b && git commit -qm ahead");
  EXPECT_FALSE(verifier_->verify(clone_).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("local main is at"), std::string::npos) << warnings_[0];
}

TEST_P(FillTip, forged_origin_head_cannot_authorize_a_remote_feature_branch) {
  // The origin advertises `feature` as its default branch; the clone has a branch of that name at
  // that very commit, and the clone is on it. Its default branch is still `main`: no tip.
  sh(base_, "git -C origin.git symbolic-ref HEAD refs/heads/feature");
  sh(clone_, "git checkout -q feature");
  EXPECT_FALSE(verifier_->verify(clone_).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("\"feature\""), std::string::npos) << warnings_[0];
}

TEST_P(FillTip, moving_remote_tracking_refs_alone_never_authorizes) {
  // origin/HEAD moved locally to origin/feature (and a local feature there): the origin says main.
  sh(clone_, "git symbolic-ref refs/remotes/origin/HEAD refs/remotes/origin/feature");
  EXPECT_FALSE(verifier_->verify(clone_).has_value());
  EXPECT_EQ(verifier_->origin_queries(), 1);
}

TEST_P(FillTip, a_success_is_kept_24_hours_for_the_same_key) {
  ASSERT_TRUE(verifier_->verify(clone_).has_value());
  take_origin_away();
  now_ += client::kTipVerifiedMaxAgeS;  // the last second of the 24 h: no new query
  auto fresh = make_verifier();         // the success is on disk, not in memory
  EXPECT_TRUE(fresh->verify(clone_).has_value());
  EXPECT_EQ(fresh->origin_queries(), 0);
  now_ += 1;  // past it: asked again, and the origin is gone
  EXPECT_FALSE(fresh->verify(clone_).has_value());
  EXPECT_EQ(fresh->origin_queries(), 1);
}

TEST_P(FillTip, a_new_local_tip_or_origin_url_needs_a_new_check) {
  ASSERT_TRUE(verifier_->verify(clone_).has_value());
  // Pushed by path: git daemon serves fetches only.
  sh(clone_, "echo c > c && git add c && git commit -qm c && git push -q " + base_ + "/origin.git main");
  auto tip = verifier_->verify(clone_);
  ASSERT_TRUE(tip.has_value());
  EXPECT_EQ(tip->commit, head_of("main"));
  EXPECT_EQ(verifier_->origin_queries(), 2);
  // The same origin under another spelling of its URL is another key: checked again.
  const std::string other = url_.ends_with(".git") ? url_.substr(0, url_.size() - 4) : url_ + ".git";
  sh(clone_, "git remote set-url origin " + other);
  EXPECT_TRUE(verifier_->verify(clone_).has_value());
  EXPECT_EQ(verifier_->origin_queries(), 3);
}

TEST_P(FillTip, a_failure_is_quiet_60_seconds_in_memory_only_and_never_authorizes) {
  take_origin_away();
  EXPECT_FALSE(verifier_->verify(clone_).has_value());
  EXPECT_EQ(verifier_->origin_queries(), 1);
  EXPECT_EQ(warnings_.size(), 1u);
  // The origin is back within the 60 s: the failure still holds, with no query and no warning.
  if (daemon_) {
    daemon_ = std::make_unique<GitDaemon>(base_, daemon_->port());  // the same URL
    ASSERT_TRUE(daemon_->running());
  } else {
    sh(base_, "mv origin-away.git origin.git");
  }
  now_ += client::kTipFailureQuietS - 1;
  EXPECT_FALSE(verifier_->verify(clone_).has_value());
  EXPECT_EQ(verifier_->origin_queries(), 1);
  EXPECT_EQ(warnings_.size(), 1u);
  // In memory only: another verifier (another `motor` process) asks at once.
  auto fresh = make_verifier();
  EXPECT_TRUE(fresh->verify(clone_).has_value());
  EXPECT_EQ(fresh->origin_queries(), 1);
  // Past the 60 s the first one asks again.
  remove_tree(base_ + "/store");
  now_ += 1;
  EXPECT_TRUE(verifier_->verify(clone_).has_value());
  EXPECT_EQ(verifier_->origin_queries(), 2);
}

TEST_P(FillTip, a_checkout_without_origin_has_no_tip_and_no_query) {
  sh(clone_, "git remote remove origin");
  EXPECT_FALSE(verifier_->verify(clone_).has_value());
  EXPECT_EQ(verifier_->origin_queries(), 0);
  EXPECT_TRUE(warnings_.empty());
}

// An origin that takes the connection and never says a word (a listening socket nobody reads:
// the kernel completes the handshake). Without the bound on `git ls-remote` this test hangs.
TEST(FillTipOrigin, an_origin_that_never_answers_fails_the_check_within_the_bound) {
  MOTOR_REQUIRE(access("/usr/bin/git", X_OK) == 0, "git is installed by scripts/setup");
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_TRUE(listener && ::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
              ::listen(listener.get(), 4) == 0 && ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::string base = make_temp_dir();
  sh(base, git_init_script("clone") + " && git checkout -qb main && echo a > a && git add a && git commit -qm a"
           " && git remote add origin git://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/x");
  std::vector<std::string> warnings;
  client::FillTipVerifier verifier(base + "/store", [] { return int64_t{1'700'000'000}; },
                                   [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_FALSE(verifier.verify(base + "/clone").has_value());  // returns: the caller's run goes on
  EXPECT_EQ(verifier.origin_queries(), 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("did not answer within"), std::string::npos) << warnings[0];
  remove_tree(base);
}

INSTANTIATE_TEST_SUITE_P(Origins, FillTip, ::testing::Values(Transport::kFileUrl, Transport::kDaemonUrl),
                         [](const auto& p) { return p.param == Transport::kFileUrl ? "file" : "git_daemon"; });

}  // namespace
}  // namespace motor::test
