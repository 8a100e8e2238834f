// The client's question to an OpenSSH control master before it uses a spare session
// (control_master_answers, src/client/ssh_session.hpp), against a stand-in master speaking the
// multiplexing protocol's hello and alive check: a master that answers, one that accepts and
// never answers (stopped), one that answers for another request, and no master at all. The real
// ssh master is asked in RemoteCallers.StaleControlMastersAreReplaced (test/integration).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "client/ssh_session.hpp"
#include "motor/unique_fd.hpp"
#include "temp_dir.hpp"

namespace motor::client {
namespace {

using namespace std::chrono_literals;

std::string be32(uint32_t v) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
  return out;
}

class ControlMaster : public test::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TempDirTest::SetUp());
    path_ = dir_ + "/master";
    listener_ = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    ASSERT_EQ(bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(listener_.get(), 4), 0);
  }
  void TearDown() override {
    if (master_.joinable()) master_.join();
    TempDirTest::TearDown();
  }
  // The stand-in master: reads the client's hello and alive check, then writes `answer`, and
  // holds the connection until the client closes it.
  void serve(std::string answer) {
    master_ = std::thread([this, answer] {
      UniqueFd conn(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) return;
      char buf[64];
      size_t got = 0;
      while (got < 24) {
        const ssize_t n = read(conn.get(), buf, sizeof buf);
        if (n <= 0) return;
        got += static_cast<size_t>(n);
      }
      if (!answer.empty() && write(conn.get(), answer.data(), answer.size()) < 0) return;
      pollfd p{conn.get(), POLLIN, 0};
      (void)poll(&p, 1, 5000);  // until the client is done (its close)
    });
  }
  static std::string hello() { return be32(8) + be32(0x00000001) + be32(4); }
  static std::string alive(uint32_t request) { return be32(12) + be32(0x80000005) + be32(request) + be32(4242); }

  std::string path_;
  UniqueFd listener_;
  std::thread master_;
};

TEST_F(ControlMaster, AMasterThatAnswersIsAlive) {
  serve(hello() + alive(1));
  EXPECT_TRUE(control_master_answers(path_, 2s));
}

TEST_F(ControlMaster, AMasterThatNeverAnswersIsNot) {
  serve("");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(control_master_answers(path_, 200ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST_F(ControlMaster, AnAnswerToAnotherRequestIsNotAlive) {
  serve(hello() + alive(7));
  EXPECT_FALSE(control_master_answers(path_, 2s));
}

TEST_F(ControlMaster, NoHelloFirstIsNotAlive) {
  serve(alive(1));
  EXPECT_FALSE(control_master_answers(path_, 2s));
}

TEST_F(ControlMaster, NoMasterIsNotAlive) {
  EXPECT_FALSE(control_master_answers(dir_ + "/none", 2s));
}

}  // namespace
}  // namespace motor::client
