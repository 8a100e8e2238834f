// How `motor run` turns a job's terminal record into its own exit status.
#include "client/exit_codes.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <optional>
#include <string>

namespace motor::client {
namespace {

using protocol::Outcome;

const std::optional<std::string> kNotKilled;

Outcome exited(int code) {
  Outcome o;
  o.kind = Outcome::Kind::kExit;
  o.code = code;
  return o;
}

Outcome signalled(int signal) {
  Outcome o;
  o.kind = Outcome::Kind::kSignal;
  o.signal = signal;
  return o;
}

Outcome of_kind(Outcome::Kind kind, std::string reason = "") {
  Outcome o;
  o.kind = kind;
  o.reason = std::move(reason);
  return o;
}

TEST(ExitCodes, TheConstantsAreTheDocumentedOnes) {
  EXPECT_EQ(kExitUsage, 64);
  EXPECT_EQ(kExitUnavailable, 69);
  EXPECT_EQ(kExitSoftware, 70);
  EXPECT_EQ(kExitTransient, 75);
  EXPECT_EQ(kExitNoPermission, 77);
  EXPECT_EQ(kExitDropped, 71);
  EXPECT_EQ(kExitDeadline, 124);
  EXPECT_EQ(kExitCancelled, 130);
}

TEST(ExitCodes, ExitCodeIsPassedThrough) {
  for (int code : {0, 1, 2, 3, 42, 63, 64, 125, 126, 127, 128, 200, 255}) {
    EXPECT_EQ(exit_code_for(exited(code), kNotKilled, std::nullopt), code) << code;
  }
}

TEST(ExitCodes, ExitCodeIsTakenModulo256) {
  EXPECT_EQ(exit_code_for(exited(256), kNotKilled, std::nullopt), 0);
  EXPECT_EQ(exit_code_for(exited(257), kNotKilled, std::nullopt), 1);
  EXPECT_EQ(exit_code_for(exited(-1), kNotKilled, std::nullopt), 255);
}

TEST(ExitCodes, SignalIs128PlusN) {
  for (int sig : {1, 2, 6, 9, 11, 13, 15, 31, 64}) {
    EXPECT_EQ(exit_code_for(signalled(sig), kNotKilled, std::nullopt), 128 + sig) << sig;
  }
}

TEST(ExitCodes, DeadlineIs124WhateverTheOutcome) {
  const std::optional<std::string> deadline("deadline");
  EXPECT_EQ(exit_code_for(signalled(9), deadline, std::nullopt), 124);
  EXPECT_EQ(exit_code_for(exited(0), deadline, std::nullopt), 124);
  EXPECT_EQ(exit_code_for(exited(143), deadline, std::nullopt), 124);
}

TEST(ExitCodes, CancelIs130) {
  EXPECT_EQ(exit_code_for(of_kind(Outcome::Kind::kCancelled), kNotKilled, std::nullopt), 130);
  EXPECT_EQ(exit_code_for(of_kind(Outcome::Kind::kCancelled), std::optional<std::string>("cancel"), std::nullopt), 130);
  EXPECT_EQ(exit_code_for(signalled(9), std::optional<std::string>("cancel"), std::nullopt), 130);
  EXPECT_EQ(exit_code_for(exited(0), std::optional<std::string>("cancel"), std::nullopt), 130);
}

// Issue 17: the runner's retry hint, not the reason's name, says whether a refusal is for now. A
// lasting refusal has no retry_after_ms key at all (another runner's, or a reason this client does
// not know); the client took every refusal without the key as transient.
TEST(ExitCodes, ARefusalWithARetryHintIs75) {
  for (const char* reason : {"runner_full", "runner_draining", "runner_disk_full", "unreachable", "queue_wait_exceeded",
                             "transfer_interrupted", "a_future_reason"}) {
    EXPECT_EQ(exit_code_for(of_kind(Outcome::Kind::kRefusedBeforeStart, reason), kNotKilled, 5000), 75) << reason;
  }
  EXPECT_EQ(exit_code_for(of_kind(Outcome::Kind::kRefusedBeforeStart, "runner_full"), kNotKilled, 0), 75);
}

TEST(ExitCodes, ARefusalWithoutARetryHintIs69) {
  for (const char* reason : {"workspace_key_rejected", "workspace_setup_failed", "network_unsupported",
                             "platform_unsupported", "runner_version_mismatch", "bundle_rejected", "a_future_reason", "",
                             "runner_full"}) {
    EXPECT_EQ(exit_code_for(of_kind(Outcome::Kind::kRefusedBeforeStart, reason), kNotKilled, std::nullopt), 69) << reason;
  }
}

// The decoder keeps the hint only when the key is there: a terminal record without it is lasting.
TEST(ExitCodes, TheHintIsReadFromTheRecord) {
  simdjson::dom::parser parser;
  auto lasting = protocol::parse_message(
      parser, R"({"id":1,"type":"terminal","job_id":"j","outcome":{"type":"refused_before_start","reason":"runner_full"}})");
  ASSERT_TRUE(lasting.ok());
  EXPECT_EQ(lasting->retry_after_ms, std::nullopt);
  EXPECT_EQ(exit_code_for(lasting->outcome, lasting->killed, lasting->retry_after_ms), 69);
  auto nulled = protocol::parse_message(
      parser, R"({"type":"terminal","job_id":"j","outcome":{"type":"refused_before_start","reason":"x"},"retry_after_ms":null})");
  ASSERT_TRUE(nulled.ok());
  EXPECT_EQ(exit_code_for(nulled->outcome, nulled->killed, nulled->retry_after_ms), 69);
  auto transient = protocol::parse_message(
      parser, R"({"type":"terminal","job_id":"j","outcome":{"type":"refused_before_start","reason":"x"},"retry_after_ms":30000})");
  ASSERT_TRUE(transient.ok());
  EXPECT_EQ(transient->retry_after_ms, std::optional<int64_t>(30000));
  EXPECT_EQ(exit_code_for(transient->outcome, transient->killed, transient->retry_after_ms), 75);
}

// Issue 14.14: a job the runner lost or stopped at its own shutdown is not reported as a Ctrl-C.
TEST(ExitCodes, AJobTheRunnerDroppedIs71) {
  EXPECT_EQ(exit_code_for(of_kind(Outcome::Kind::kOutcomeUnknown), kNotKilled, std::nullopt), 71);
  EXPECT_EQ(exit_code_for(of_kind(Outcome::Kind::kCancelled), std::optional<std::string>("shutdown"), std::nullopt), 71);
  EXPECT_EQ(exit_code_for(signalled(9), std::optional<std::string>("shutdown"), std::nullopt), 71);
  EXPECT_EQ(exit_code_for(of_kind(Outcome::Kind::kHistoryExpired), kNotKilled, std::nullopt), 70);
}

TEST(ExitCodes, UnknownKilledValueIsIgnored) {
  EXPECT_EQ(exit_code_for(exited(3), std::optional<std::string>("something_new"), std::nullopt), 3);
}

TEST(ExitCodes, ErrorsByTheirCode) {
  EXPECT_EQ(exit_code_for_error("unauthorized"), 77);
  EXPECT_EQ(exit_code_for_error("runner_full"), 75);      // too many sessions: for now
  EXPECT_EQ(exit_code_for_error("runner_draining"), 75);
  EXPECT_EQ(exit_code_for_error("unreachable"), 75);
  EXPECT_EQ(exit_code_for_error("bad_request"), 64);
  EXPECT_EQ(exit_code_for_error("internal"), 70);
  EXPECT_EQ(exit_code_for_error("protocol"), 70);
}

// Over SSH (docs/remote-callers.md): transient ones 75, lasting ones 69 or 77.
TEST(ExitCodes, RemoteErrorsByTheirCode) {
  EXPECT_EQ(exit_code_for_error("host_unreachable"), 75);
  EXPECT_EQ(exit_code_for_error("runner_down"), 75);
  EXPECT_EQ(exit_code_for_error("auth_refused"), 77);
  EXPECT_EQ(exit_code_for_error("not_bridged"), 77);
  EXPECT_EQ(exit_code_for_error("runner_too_old"), 69);
}

}  // namespace
}  // namespace motor::client
