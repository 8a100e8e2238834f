// Pieces every `motor` command shares: reaching the runner, the caller's Ctrl-C, printing errors
// and frames.
#pragma once

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "client/cli.hpp"
#include "client/connection.hpp"

namespace motor::client {

// Error codes the client makes itself (not the runner's).
inline constexpr std::string_view kInterrupted = "interrupted";  // Ctrl-C while waiting
inline constexpr std::string_view kExitCarrier = "exit";          // the message is an exit status

// Ctrl-C count: SIGINT arrives only inside ppoll (run_cli blocks it elsewhere).
extern volatile sig_atomic_t g_interrupts;
bool interrupted();

Endpoint endpoint_of(const CliOptions& o);
Expected<Connection> connect_to(const CliOptions& o);

// The codes a runner refuses a whole connection with (an error without a request id).
bool is_connection_refusal(std::string_view code);
void print_error(const Error& e);
void write_out(int fd, std::string_view data);
void print_json_line(const protocol::Message& m);

// {"job_id":...,"from_seq":...,"secret":...} for attach, status and cancel.
std::string job_ref_params(const std::string& job_id, const std::optional<std::string>& secret,
                           std::optional<int64_t> from_seq);

}  // namespace motor::client
