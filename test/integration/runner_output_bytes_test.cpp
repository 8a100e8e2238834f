// A job's output reaches the caller byte for byte (issue 20's output path: the base64 of the
// records, the client's decoding): every byte value, not UTF-8, in chunks of every size the
// runner reads, live (as JSON records with `--json`, as binary frames without), replayed from the
// log by `motor attach`, and again after a runner restart.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "protocol/base64.hpp"
#include "support/runner_harness.hpp"

namespace motor::test {
namespace {

// 3 MiB and 4,096 more bytes of 0..255 over and over with a step that is prime to 256: not a
// multiple of 3 (base64 groups) nor of 64 KiB (the runner's reads).
std::string expected_bytes() {
  std::string out;
  const size_t n = (size_t{3} << 20) + 4096 + 1;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((i * 7 + i / 256) & 0xff));
  return out;
}

constexpr const char* kWriter =
    "python3 -c 'import sys\n"
    "n = (3 << 20) + 4096 + 1\n"
    "sys.stdout.buffer.write(bytes(((i * 7 + i // 256) & 255) for i in range(n)))'";

TEST(RunnerOutputBytes, EveryByteArrivesExactlyLiveReplayedAndAfterARestart) {
  MOTOR_REQUIRE(geteuid() == 0, "integration tests start a real runner and need root");
  RunnerProcess runner;
  ASSERT_TRUE(runner.start()) << runner.log();
  const std::string want = expected_bytes();
  auto live = runner.client({"run", "--json", "-c", kWriter});
  ASSERT_EQ(live.exit_code, 0) << live.err << runner.log();
  const auto at = live.out.find("\"job_id\":\"");
  ASSERT_NE(at, std::string::npos) << live.out.substr(0, 400);
  const std::string job = live.out.substr(at + 10, 36);
  // --json prints the records as sent: JSON with base64 (the client asks for binary frames only
  // when it writes the bytes themselves).
  std::string from_json;
  for (size_t start = 0, end; (end = live.out.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = live.out.substr(start, end - start);
    if (json_field(line, "/type") != "output") continue;
    auto bytes = protocol::base64_decode(json_field(line, "/bytes"));
    ASSERT_TRUE(bytes) << line.substr(0, 200);
    from_json += *bytes;
  }
  EXPECT_TRUE(from_json == want) << "the JSON records' bytes differ (" << from_json.size() << " bytes)";
  auto plain = runner.client({"run", "-c", kWriter});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.size(), want.size());
  EXPECT_TRUE(plain.out == want) << "the live output differs";
  auto replay = runner.client({"attach", job});
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_TRUE(replay.out == want) << "the replay from the log differs (" << replay.out.size() << " bytes)";
  ASSERT_EQ(runner.stop(), 0);
  ASSERT_TRUE(runner.start()) << runner.log();
  auto restarted = runner.client({"attach", job});
  ASSERT_EQ(restarted.exit_code, 0) << restarted.err;
  EXPECT_TRUE(restarted.out == want) << "the replay after a restart differs (" << restarted.out.size() << " bytes)";
}

}  // namespace
}  // namespace motor::test
