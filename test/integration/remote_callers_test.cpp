// Remote callers (issue 18) end to end: the real `motor` client with --host, the system's OpenSSH
// client and a real sshd on loopback (test/support/sshd_harness), the bridge account `motor` with
// authorized_keys lines in conf/authorized_keys.example's form whose forced command points at a
// test runner. Every verb over SSH, callers kept apart, a transport killed mid-job, stale control
// masters, and the errors a remote caller can act on.
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "client/ssh_spare.hpp"
#include "support/runner_harness.hpp"
#include "support/shell.hpp"
#include "support/sshd_harness.hpp"

namespace motor::test {
namespace {

using namespace std::chrono_literals;

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A forced command standing for a runner older than this client: it answers the client's first
// request (runner.hello) with `reply` as one frame, then waits for the session to end. Returns
// the authorized_keys options that run it.
std::string old_runner_options(const std::string& dir, const std::string& name, const std::string& reply) {
  std::string escaped;
  const uint32_t n = static_cast<uint32_t>(reply.size());
  for (const int shift : {24, 16, 8, 0}) escaped += fmt::format("\\{:03o}", (n >> shift) & 0xff);
  for (const char c : reply) {
    if (c == '\\') escaped += "\\\\";
    else if (c == '%') escaped += "%%";
    else escaped += c;
  }
  const std::string script = dir + "/" + name;
  write_file(script, fmt::format("#!/bin/sh\nprintf '{}'\nexec cat >/dev/null\n", escaped));
  chmod(script.c_str(), 0755);
  return fmt::format(R"(restrict,command="{}")", script);
}

// The keeper of spare sessions (src/client/ssh_spare.hpp): the process named motor whose command
// line is the keeper's and names this test's control directory; -1 if none.
pid_t keeper_of(const SshServer& sshd) {
  const auto keepers = processes_with("--ssh-spare-keeper");
  for (pid_t p : processes_with(sshd.dir() + "/run/motor-ssh/")) {
    if (comm_of(p) == "motor" && std::find(keepers.begin(), keepers.end(), p) != keepers.end()) return p;
  }
  return -1;
}

std::vector<pid_t> ssh_children(pid_t pid) {
  std::vector<pid_t> out;
  for (pid_t c : children_of(pid)) {
    if (comm_of(c) == "ssh") out.push_back(c);
  }
  return out;
}

// Waits until the keeper is up and holds a spare session (an ssh child); its pid, or -1.
pid_t keeper_with_a_spare(const SshServer& sshd) {
  for (int i = 0; i < 500; ++i) {
    const pid_t k = keeper_of(sshd);
    if (k > 0 && !ssh_children(k).empty()) return k;
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

class RemoteCallers : public ::testing::Test {
 protected:
  void SetUp() override {
    MOTOR_REQUIRE(!sshd_binary().empty(), "openssh-server is not installed (scripts/setup installs it)");
    MOTOR_REQUIRE(getpwnam("motor") != nullptr, "the bridge account motor does not exist (scripts/setup creates it)");
    runner_ = std::make_unique<RunnerProcess>();
    ASSERT_TRUE(runner_->start()) << runner_->log();
    sshd_ = std::make_unique<SshServer>();
    alice_ = sshd_->make_key("alice");
    bob_ = sshd_->make_key("bob");
    sshd_->authorize("motor", SshServer::bridge_options(runner_->socket(), "alice"), alice_);
    sshd_->authorize("motor", SshServer::bridge_options(runner_->socket(), "bob"), bob_);
  }
  void TearDown() override {
    sshd_.reset();  // masters and sessions first: their bridges hold runner sessions
    runner_.reset();
  }
  bool start_sshd() {
    const bool ok = sshd_->start();
    EXPECT_TRUE(ok) << sshd_->log();
    return ok;
  }
  // The id of the newest job `key`'s caller sees, once it is running.
  std::string running_job(const std::string& key) {
    for (int i = 0; i < 500; ++i) {
      auto list = sshd_->motor(key, {"list", "--json"});
      const auto at = list.out.rfind("\"state\":\"running\"");
      if (at != std::string::npos) {
        const auto id = list.out.rfind("\"job_id\":\"", at);
        return list.out.substr(id + 10, 36);
      }
      std::this_thread::sleep_for(20ms);
    }
    return "";
  }

  void kill_transport_mid_job(bool on_spare);

  std::unique_ptr<RunnerProcess> runner_;
  std::unique_ptr<SshServer> sshd_;
  std::string alice_, bob_;
};

// On the runner's socket, without SSH: a session of the bridge account may name a caller (once),
// must do so before anything else, and is then that caller and nothing more.
TEST_F(RemoteCallers, TheBridgeAccountMustNameACallerFirst) {
  const passwd* bridge = getpwnam("motor");
  ASSERT_NE(bridge, nullptr);
  auto unnamed = RawClient::as_account(runner_->socket(), bridge->pw_uid, bridge->pw_gid);
  ASSERT_TRUE(unnamed && unnamed->connected());
  ASSERT_TRUE(unnamed->send_frame(R"({"id":1,"method":"exec.list","params":{}})"));
  auto refused = unnamed->read_frame();
  ASSERT_TRUE(refused);
  EXPECT_EQ(json_field(*refused, "/error/code"), "unauthorized") << *refused;

  auto named = RawClient::as_account(runner_->socket(), bridge->pw_uid, bridge->pw_gid);
  ASSERT_TRUE(named && named->connected());
  ASSERT_TRUE(named->send_frame(R"({"id":1,"method":"runner.identify","params":{"caller":"carol"}})"));
  auto identified = named->read_frame();
  ASSERT_TRUE(identified);
  EXPECT_EQ(json_field(*identified, "/result/caller"), "carol") << *identified;
  ASSERT_TRUE(named->send_frame(R"({"id":2,"method":"runner.identify","params":{"caller":"alice"}})"));
  auto again = named->read_frame();
  ASSERT_TRUE(again);
  EXPECT_EQ(json_field(*again, "/error/code"), "unauthorized") << "a named caller cannot rename itself: " << *again;
  ASSERT_TRUE(named->send_frame(R"({"id":3,"method":"runner.hello","params":{}})"));
  auto hello = named->read_frame();
  ASSERT_TRUE(hello);
  EXPECT_EQ(json_field(*hello, "/result/caller"), "carol") << *hello;
}

// A job's output and exit status are byte for byte those of the same job on the local socket;
// status, attach, list and the runner's log name the caller.
TEST_F(RemoteCallers, RunAttachStatusListMatchTheLocalSocket) {
  ASSERT_TRUE(start_sshd());
  const std::string command = R"(printf 'out\000\377 line\n'; printf 'err\n' >&2; printf 'tail'; exit 3)";
  auto local = runner_->client({"run", "--no-sync", "-c", command});
  auto remote = sshd_->motor(alice_, {"run", "--no-sync", "-c", command});
  EXPECT_EQ(remote.exit_code, 3) << remote.err << sshd_->log();
  EXPECT_EQ(remote.exit_code, local.exit_code);
  EXPECT_EQ(remote.out, local.out);
  EXPECT_EQ(remote.out, std::string("out\0\377 line\ntail", 15));
  EXPECT_EQ(remote.err, local.err);

  auto listed = sshd_->motor(alice_, {"list", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(count(listed.out, "\"job_id\""), 1u) << "alice sees only her own job: " << listed.out;
  const std::string id = listed.out.substr(listed.out.find("\"job_id\":\"") + 10, 36);
  EXPECT_NE(listed.out.find("\"caller\":\"alice\""), std::string::npos);

  auto attached = sshd_->motor(alice_, {"attach", id});
  EXPECT_EQ(attached.exit_code, 3) << attached.err;
  EXPECT_EQ(attached.out, remote.out);
  auto status = sshd_->motor(alice_, {"status", id});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("terminal:"), std::string::npos) << status.out;

  // --json: the same records, in the same order, as on the local socket.
  auto json_remote = sshd_->motor(alice_, {"run", "--no-sync", "--json", "-c", "echo hi"});
  auto json_local = runner_->client({"run", "--no-sync", "--json", "-c", "echo hi"});
  auto types = [](const std::string& lines) {
    std::string out;
    for (size_t at = lines.find("\"type\":\""); at != std::string::npos; at = lines.find("\"type\":\"", at + 1)) {
      out += lines.substr(at + 8, lines.find('"', at + 8) - at - 8) + " ";
    }
    return out;
  };
  EXPECT_EQ(json_remote.exit_code, 0) << json_remote.err;
  EXPECT_EQ(types(json_remote.out), types(json_local.out)) << json_remote.out;
  EXPECT_EQ(json_remote.out.substr(0, 8), json_local.out.substr(0, 8));

  // The operator, on the host: every caller's job, and the caller's name.
  auto table = runner_->client({"list"});
  EXPECT_NE(table.out.find("CALLER"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("alice"), std::string::npos) << table.out;
  EXPECT_NE(runner_->log().find("started for caller alice"), std::string::npos) << runner_->log();
}

// Cancel over SSH: the job ends cancelled and its `run` exits 130.
// Keys set up before motor-bridge existed name `motor-runner connect`: that bridge still works.
TEST_F(RemoteCallers, TheOlderForcedCommandStillBridges) {
  const std::string carol = sshd_->make_key("carol");
  sshd_->authorize("motor", SshServer::runner_connect_options(runner_->socket(), "carol"), carol);
  ASSERT_TRUE(start_sshd());
  auto r = sshd_->motor(carol, {"run", "--no-sync", "-c", "printf 'through motor-runner connect'"});
  EXPECT_EQ(r.exit_code, 0) << r.err << sshd_->log();
  EXPECT_EQ(r.out, "through motor-runner connect");
  auto list = sshd_->motor(carol, {"list", "--json"});
  EXPECT_NE(list.out.find("\"caller\":\"carol\""), std::string::npos) << list.out;
}

TEST_F(RemoteCallers, CancelOverSsh) {
  ASSERT_TRUE(start_sshd());
  auto run = std::async(std::launch::async, [&] { return sshd_->motor(alice_, {"run", "--no-sync", "--", "sleep", "60"}); });
  const std::string id = running_job(alice_);
  ASSERT_FALSE(id.empty());
  auto cancel = sshd_->motor(alice_, {"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  auto ran = run.get();
  EXPECT_EQ(ran.exit_code, 130) << ran.err;
}

// A checkout synced over SSH: workspace prepare, a run in it, workspace list and drop.
TEST_F(RemoteCallers, WorkspacePrepareRunAndDropOverSsh) {
  ASSERT_TRUE(start_sshd());
  sh(sshd_->dir(), git_init_script("repo") + " && echo remote-content > file.txt && git add file.txt && git commit -qm one");
  const std::string repo = sshd_->dir() + "/repo";
  auto prepared = sshd_->motor(alice_, {"workspace", "prepare", "-w", "ws"}, "motor", repo);
  ASSERT_EQ(prepared.exit_code, 0) << prepared.err;
  EXPECT_TRUE(exists(runner_->workspace("ws", "alice") + "/file.txt"));
  sh(repo, "echo edited > file.txt");  // uncommitted: run syncs the checkout as it is on disk
  auto ran = sshd_->motor(alice_, {"run", "-w", "ws", "--", "cat", "file.txt"}, "motor", repo);
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_EQ(ran.out, "edited\n");
  auto listed = sshd_->motor(alice_, {"workspace", "list"});
  EXPECT_NE(listed.out.find("ws"), std::string::npos) << listed.out;
  auto dropped = sshd_->motor(alice_, {"workspace", "drop", "ws"});
  EXPECT_EQ(dropped.exit_code, 0) << dropped.err;
  EXPECT_FALSE(exists(runner_->workspace("ws", "alice")));
}

// Two callers on the same bridge account: neither lists, attaches to, reads the status of,
// cancels or drops what is the other's, and neither drains the runner.
TEST_F(RemoteCallers, TwoCallersAreKeptApart) {
  ASSERT_TRUE(start_sshd());
  sh(sshd_->dir(), git_init_script("repo") + " && echo a > a && git add a && git commit -qm a");
  ASSERT_EQ(sshd_->motor(alice_, {"workspace", "prepare", "-w", "shared"}, "motor", sshd_->dir() + "/repo").exit_code, 0);
  auto run = std::async(std::launch::async, [&] { return sshd_->motor(alice_, {"run", "--no-sync", "--", "sleep", "60"}); });
  const std::string id = running_job(alice_);
  ASSERT_FALSE(id.empty());

  EXPECT_EQ(sshd_->motor(bob_, {"list", "--json"}).out.find(id), std::string::npos);
  for (const std::vector<std::string>& verb : {std::vector<std::string>{"status", id}, {"attach", id}}) {
    auto r = sshd_->motor(bob_, verb);
    EXPECT_EQ(r.exit_code, 77) << verb[0] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("not yours"), std::string::npos) << r.err;
  }
  // A cancel is acknowledged as for an unknown id (exec-remote/v1's tombstone; the same answer,
  // so it tells bob nothing) and leaves alice's job running.
  EXPECT_EQ(sshd_->motor(bob_, {"cancel", id}).exit_code, 0);
  EXPECT_EQ(running_job(alice_), id);
  auto status = sshd_->motor(bob_, {"status", "--json"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(status.out.find(id), std::string::npos) << "runner.status shows bob alice's job: " << status.out;
  EXPECT_EQ(sshd_->motor(bob_, {"workspace", "list"}).out.find("shared"), std::string::npos);
  (void)sshd_->motor(bob_, {"workspace", "drop", "shared"});  // bob's own (absent) workspace
  EXPECT_TRUE(exists(runner_->workspace("shared", "alice") + "/a"));
  auto drain = sshd_->motor(bob_, {"drain"});
  EXPECT_EQ(drain.exit_code, 77) << drain.err;

  EXPECT_EQ(sshd_->motor(alice_, {"cancel", id}).exit_code, 0);
  EXPECT_EQ(run.get().exit_code, 130);
}

// Drain and resume are the operator's: root's key (no --caller) reaches them over SSH.
TEST_F(RemoteCallers, TheOperatorDrainsOverSsh) {
  const std::string op = sshd_->make_key("operator");
  sshd_->authorize("root", SshServer::bridge_options(runner_->socket(), ""), op);
  ASSERT_TRUE(start_sshd());
  auto drain = sshd_->motor(op, {"drain"}, "root");
  ASSERT_EQ(drain.exit_code, 0) << drain.err;
  EXPECT_NE(drain.out.find("draining: true"), std::string::npos) << drain.out;
  auto refused = sshd_->motor(alice_, {"run", "--no-sync", "--", "true"});
  EXPECT_EQ(refused.exit_code, 75) << refused.err;
  EXPECT_NE(refused.err.find("runner_draining"), std::string::npos) << refused.err;
  EXPECT_EQ(sshd_->motor(op, {"resume"}, "root").exit_code, 0);
  EXPECT_EQ(sshd_->motor(alice_, {"run", "--no-sync", "--", "true"}).exit_code, 0);
  auto all = sshd_->motor(op, {"list", "--json"}, "root");
  EXPECT_NE(all.out.find("\"caller\":\"alice\""), std::string::npos) << "the operator sees every caller's jobs";
}

// The client's ssh killed mid-job: it reconnects and resumes from the last seq + 1; the job runs
// once, and its output arrives exactly once, complete.
// The ssh carrying a running job is killed: the job runs once and its whole output arrives, on a
// session the client opened itself (its child) or a spare (the keeper's child, ssh_spare.hpp).
void RemoteCallers::kill_transport_mid_job(bool on_spare) {
  ASSERT_TRUE(start_sshd());
  if (on_spare) {
    ASSERT_EQ(sshd_->motor(alice_, {"run", "--no-sync", "--", "true"}).exit_code, 0);
    ASSERT_GT(keeper_with_a_spare(*sshd_), 0);
  }
  const std::string marker = "remote-resume-" + unique_marker();
  const std::string command = fmt::format("echo {}; for i in $(seq 1 100); do echo line $i; sleep 0.1; done", marker);
  auto run = std::async(std::launch::async, [&] { return sshd_->motor(alice_, {"run", "--no-sync", "-c", command}); });
  pid_t client = -1;
  for (int i = 0; i < 500 && client < 0; ++i) {
    for (pid_t p : processes_with(marker)) {
      if (comm_of(p) == "motor") client = p;
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(client, 0);
  const size_t jobs_before = on_spare ? 1 : 0;
  for (int i = 0; i < 500 && count(runner_->log(), "started for caller alice") == jobs_before; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(1s);  // some output has gone through
  int killed = 0;
  if (on_spare) {
    // The keeper's ssh children: the spare it holds now, and the one serving the job, which is
    // the older of the two (the lower pid: pids are not reused this soon).
    const pid_t keeper = keeper_of(*sshd_);
    auto sessions = ssh_children(keeper);
    ASSERT_EQ(sessions.size(), 2u) << "keeper " << keeper;
    std::sort(sessions.begin(), sessions.end());
    EXPECT_TRUE(ssh_children(client).empty()) << "the call started an ssh of its own";
    if (kill(sessions[0], SIGKILL) == 0) ++killed;
  } else {
    // The ssh is the child named ssh of a process named motor that carries the marker. (The pid
    // found above may have been the client's fork before it exec'd ssh: it had the client's name
    // and command line then, and is the ssh itself now.)
    for (int i = 0; i < 100 && killed == 0; ++i) {  // (between exec and ssh, MOTOR_SSH_COMMAND's sh)
      for (pid_t p : processes_with(marker)) {
        if (comm_of(p) != "motor") continue;
        client = p;
        for (pid_t c : children_of(p)) {
          if (comm_of(c) == "ssh" && kill(c, SIGKILL) == 0) ++killed;
        }
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  EXPECT_EQ(killed, 1) << [&] {
    std::string seen = fmt::format("client {} ({}):", client, comm_of(client));
    for (pid_t c : children_of(client)) seen += fmt::format(" {} ({})", c, comm_of(c));
    return seen;
  }();
  auto ran = run.get();
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  std::string expected = marker + "\n";
  for (int i = 1; i <= 100; ++i) expected += fmt::format("line {}\n", i);
  EXPECT_EQ(ran.out, expected);
  auto list = sshd_->motor(alice_, {"list", "--json"});
  EXPECT_EQ(count(list.out, "\"job_id\""), jobs_before + 1) << "the job was submitted once: " << list.out;
  EXPECT_EQ(count(runner_->log(), "started for caller alice"), jobs_before + 1) << runner_->log();
}

TEST_F(RemoteCallers, KilledSshMidJobFinishesOnceWithItsFullOutput) { kill_transport_mid_job(false); }
TEST_F(RemoteCallers, AKilledSpareMidJobFinishesOnceWithItsFullOutput) { kill_transport_mid_job(true); }

// A control master that died (its socket left behind), a socket file nobody listens on, and a
// master that hangs: each is replaced without the caller noticing.
TEST_F(RemoteCallers, StaleControlMastersAreReplaced) {
  ASSERT_TRUE(start_sshd());
  ASSERT_EQ(sshd_->motor(alice_, {"run", "--no-sync", "--", "true"}).exit_code, 0);
  auto sockets = sshd_->control_sockets();
  ASSERT_EQ(sockets.size(), 1u);
  const std::string path = sockets[0];
  const pid_t first = sshd_->master_pid(path, alice_);
  ASSERT_GT(first, 0);
  // A warm master carries the next call.
  ASSERT_EQ(sshd_->motor(alice_, {"run", "--no-sync", "--", "true"}).exit_code, 0);
  EXPECT_EQ(sshd_->master_pid(path, alice_), first);
  auto end_master = [](pid_t pid, int signal) {
    kill(pid, signal);
    for (int i = 0; i < 200 && kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(10ms);
  };
  auto echo_works = [&](const std::string& word) {
    auto r = sshd_->motor(alice_, {"run", "--no-sync", "--", "echo", word});
    EXPECT_EQ(r.exit_code, 0) << word << ": " << r.err;
    EXPECT_EQ(r.out, word + "\n");
  };

  end_master(first, SIGKILL);
  ASSERT_TRUE(exists(path)) << "a killed master leaves its socket";
  echo_works("one");
  const pid_t second = sshd_->master_pid(path, alice_);
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);

  // A socket file bound by someone who is gone.
  end_master(second, SIGTERM);
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  close(fd);
  echo_works("two");

  // A master that accepts and never answers (stopped): the client's check finds it stuck.
  const pid_t third = sshd_->master_pid(path, alice_);
  ASSERT_GT(third, 0);
  kill(third, SIGSTOP);
  echo_works("three");
  kill(third, SIGCONT);
  kill(third, SIGTERM);
}

// A call after the first takes a session the keeper opened beforehand: while its job runs, the
// client has no ssh of its own, and the session serving it is the keeper's. MOTOR_SSH_SPARE=0:
// no keeper, every call its own ssh (the control: without the keeper the first check fails).
// The keeper says runner.hello on a spare as it opens it: a call that takes it then gets the
// runner's answer with it and sends its requests with no round trip before them.
TEST_F(RemoteCallers, ASpareComesWithTheRunnersAnswerToHello) {
  ASSERT_TRUE(start_sshd());
  ASSERT_EQ(sshd_->motor(alice_, {"run", "--no-sync", "--", "true"}).exit_code, 0);
  ASSERT_GT(keeper_with_a_spare(*sshd_), 0);
  ASSERT_EQ(sshd_->keeper_sockets().size(), 1u);
  std::optional<std::string> reply;
  for (int i = 0; i < 100 && !reply; ++i) {
    std::this_thread::sleep_for(50ms);
    auto spare = client::take_spare_session(sshd_->keeper_sockets()[0]);
    ASSERT_TRUE(spare.session.valid());
    reply = spare.hello_reply;  // else the answer was on its way: the next spare, then
  }
  ASSERT_TRUE(reply.has_value()) << "no spare came with the runner's answer";
  EXPECT_NE(reply->find("\"protocol\""), std::string::npos) << *reply;
  // A call on such a spare works as any other.
  std::this_thread::sleep_for(300ms);
  auto r = sshd_->motor(alice_, {"run", "--no-sync", "--", "echo", "verified"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "verified\n");
}

TEST_F(RemoteCallers, LaterCallsRideASpareSessionOpenedBeforehand) {
  ASSERT_TRUE(start_sshd());
  auto env = sshd_->client_env(alice_);
  env.push_back("MOTOR_SSH_SPARE=0");
  auto off = run_program({MOTOR_CLIENT_BIN, "--host", sshd_->url(), "run", "--no-sync", "--", "true"}, env);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(sshd_->keeper_sockets().empty()) << "MOTOR_SSH_SPARE=0 started a keeper";
  EXPECT_EQ(keeper_of(*sshd_), -1);

  ASSERT_EQ(sshd_->motor(alice_, {"run", "--no-sync", "--", "true"}).exit_code, 0);
  const pid_t keeper = keeper_with_a_spare(*sshd_);
  ASSERT_GT(keeper, 0) << "no keeper with a spare session after a call";
  EXPECT_EQ(sshd_->keeper_sockets().size(), 1u);
  const std::vector<pid_t> spares = ssh_children(keeper);

  const std::string marker = "spare-" + unique_marker();
  auto run = std::async(std::launch::async, [&] {
    return sshd_->motor(alice_, {"run", "--no-sync", "-c", fmt::format("echo {}; sleep 2; echo done", marker)});
  });
  // Its job runs (the runner's third for alice), with no other call between (each takes a spare).
  for (int i = 0; i < 500 && count(runner_->log(), "started for caller alice") < 3; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(count(runner_->log(), "started for caller alice"), 3u) << runner_->log();
  pid_t client = -1;
  for (pid_t p : processes_with(marker)) {
    if (comm_of(p) == "motor") client = p;
  }
  ASSERT_GT(client, 0);
  EXPECT_TRUE(ssh_children(client).empty()) << "the call started an ssh of its own";
  const auto now = ssh_children(keeper);
  EXPECT_NE(std::find(now.begin(), now.end(), spares[0]), now.end()) << "the spare is not serving the call: " << [&] {
    std::string seen = fmt::format("spare {}, keeper {}'s ssh now:", spares[0], keeper);
    for (pid_t c : now) seen += fmt::format(" {}", c);
    return seen;
  }();
  auto ran = run.get();
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_EQ(ran.out, marker + "\ndone\n");
  EXPECT_EQ(keeper_of(*sshd_), keeper) << "one keeper for all the calls";
}

// A keeper lives no longer than what it rides: a spare that dies (its ssh killed) or a master
// that exits (`ssh -O exit`) ends it and removes its socket; the calls after go on as before and
// start a new one.
TEST_F(RemoteCallers, AKeeperEndsWithItsSpareOrItsMaster) {
  ASSERT_TRUE(start_sshd());
  auto echo_works = [&](const std::string& word) {
    auto r = sshd_->motor(alice_, {"run", "--no-sync", "--", "echo", word});
    EXPECT_EQ(r.exit_code, 0) << word << ": " << r.err;
    EXPECT_EQ(r.out, word + "\n");
  };
  auto gone = [&](pid_t pid) {
    for (int i = 0; i < 500 && kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(10ms);
    return kill(pid, 0) != 0 && sshd_->keeper_sockets().empty();
  };
  echo_works("one");
  const pid_t first = keeper_with_a_spare(*sshd_);
  ASSERT_GT(first, 0);
  for (pid_t spare : ssh_children(first)) kill(spare, SIGKILL);
  EXPECT_TRUE(gone(first)) << "the keeper outlived its spare";
  echo_works("two");
  const pid_t second = keeper_with_a_spare(*sshd_);
  ASSERT_GT(second, 0);
  EXPECT_NE(second, first);

  auto sockets = sshd_->control_sockets();
  ASSERT_EQ(sockets.size(), 1u);
  auto exit_master = run_program({"/usr/bin/ssh", "-F", sshd_->dir() + "/ssh_config", "-i", alice_, "-S", sockets[0],
                                  "-O", "exit", "127.0.0.1"});
  EXPECT_EQ(exit_master.exit_code, 0) << exit_master.err;
  EXPECT_TRUE(gone(second)) << "the keeper outlived its master";
  echo_works("three");
  const pid_t third = keeper_with_a_spare(*sshd_);
  ASSERT_GT(third, 0);

  // A keeper never logs in by itself: started (by hand, as a call starts it) on the socket of a
  // master killed with -9, its spare does not ride anything and fails; no login reaches sshd and
  // the keeper ends. (Without its failing ProxyCommand, ssh would log in directly.)
  std::string args = read_file(fmt::format("/proc/{}/cmdline", third));
  std::vector<std::string> argv;
  for (size_t at = 0; at < args.size();) {
    const size_t end = args.find('\0', at);
    argv.push_back(args.substr(at, end - at));
    at = end == std::string::npos ? args.size() : end + 1;
  }
  ASSERT_EQ(argv.size(), 8u) << args;
  argv[0] = MOTOR_CLIENT_BIN;
  const pid_t master = sshd_->master_pid(sockets[0], alice_);
  ASSERT_GT(master, 0);
  kill(third, SIGTERM);
  EXPECT_TRUE(gone(third));
  kill(master, SIGKILL);
  for (int i = 0; i < 200 && kill(master, 0) == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(exists(sockets[0])) << "a killed master leaves its socket";
  const size_t logins = count(sshd_->log(), "Accepted publickey");
  auto by_hand = run_program(argv, sshd_->client_env(alice_), 30s);
  EXPECT_EQ(by_hand.exit_code, 0) << by_hand.err;
  EXPECT_EQ(count(sshd_->log(), "Accepted publickey"), logins) << sshd_->log();
  EXPECT_TRUE(sshd_->keeper_sockets().empty());
}

// Each failure a remote caller can act on is one line with its own exit status.
TEST_F(RemoteCallers, ErrorsAreOneLineWithTheirOwnExitStatus) {
  const std::string stranger = sshd_->make_key("stranger");
  const std::string plain = sshd_->make_key("plain");
  const std::string no_caller = sshd_->make_key("nocaller");
  const std::string down = sshd_->make_key("down");
  const std::string bad_name = sshd_->make_key("badname");
  sshd_->authorize("motor", R"(restrict,command="echo welcome to the build host")", plain);
  sshd_->authorize("motor", SshServer::bridge_options(runner_->socket(), ""), no_caller);
  sshd_->authorize("motor", SshServer::bridge_options(sshd_->dir() + "/no-runner.sock", "carol"), down);
  sshd_->authorize("motor", SshServer::bridge_options(runner_->socket(), "bad/name"), bad_name);
  // Runners too old: one from before runner.hello, one that speaks an older protocol.
  const std::string before_hello = sshd_->make_key("beforehello");
  const std::string old_protocol = sshd_->make_key("oldprotocol");
  sshd_->authorize("motor",
                   old_runner_options(sshd_->dir(), "runner-before-hello",
                                      R"({"id":0,"error":{"code":"bad_request","message":"unknown method \"runner.hello\""}})"),
                   before_hello);
  sshd_->authorize("motor", old_runner_options(sshd_->dir(), "runner-protocol-0", R"({"id":0,"result":{"protocol":0}})"),
                   old_protocol);
  ASSERT_TRUE(start_sshd());
  struct Case {
    std::string what, key, expect;
    int code;
  };
  for (const Case& c : {Case{"authentication refused", stranger, "refused this caller over SSH", 77},
                        Case{"account not bridged", plain, "is not motor-runner connect", 77},
                        Case{"bridge account without a caller", no_caller, "forced command", 77},
                        Case{"runner down behind SSH", down, "no runner answers", 75},
                        Case{"caller name refused by the runner", bad_name, "refused the caller name", 77},
                        Case{"runner without runner.hello", before_hello, "is too old for this client", 69},
                        Case{"runner of an older protocol", old_protocol, "speaks protocol 0, this client needs", 69}}) {
    auto r = sshd_->motor(c.key, {"list"});
    EXPECT_EQ(r.exit_code, c.code) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.what << ": " << r.err;
    EXPECT_EQ(count(r.err, "\n"), 1u) << c.what << ": " << r.err;
  }
  // Nothing listens on port 1.
  auto r = run_program({MOTOR_CLIENT_BIN, "--host", "ssh://motor@127.0.0.1:1", "list"},
                       sshd_->client_env(alice_));
  EXPECT_EQ(r.exit_code, 75) << r.err;
  EXPECT_NE(r.err.find("cannot reach 127.0.0.1 over SSH"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1u) << r.err;
  // `ssh host motor list` with a caller's key: one line on how to use the client, exit 64.
  auto direct = run_program({"/usr/bin/ssh", "-F", sshd_->dir() + "/ssh_config", "-i", alice_, "-p",
                             std::to_string(sshd_->port()), "motor@127.0.0.1", "motor", "list"});
  EXPECT_EQ(direct.exit_code, 64) << direct.err;
  EXPECT_NE(direct.err.find("motor --host"), std::string::npos) << direct.err;
  EXPECT_EQ(count(direct.err, "\n"), 1u) << direct.err;
}

}  // namespace
}  // namespace motor::test
