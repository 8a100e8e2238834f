#include "client/cli_common.hpp"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "motor/fd_io.hpp"
#include "protocol/json_writer.hpp"

namespace motor::client {

volatile sig_atomic_t g_interrupts = 0;
bool interrupted() { return g_interrupts > 0; }

Endpoint endpoint_of(const CliOptions& o) { return Endpoint{o.socket_path, o.host}; }

Expected<Connection> connect_to(const CliOptions& o) { return Connection::open(endpoint_of(o), std::getenv("MOTOR_SSH_COMMAND")); }

bool is_connection_refusal(std::string_view code) {
  using protocol::RefusalReason;
  return code == "unauthorized" || code == protocol::to_wire(RefusalReason::kRunnerFull) ||
         code == protocol::to_wire(RefusalReason::kRunnerDraining);
}

void print_error(const Error& e) {
  if (is_connection_refusal(e.code)) {
    fmt::print(stderr, "motor: the runner refused this connection ({}): {}\n", e.code, e.message);
  } else {
    fmt::print(stderr, "motor: {}\n", e.message);
  }
}

void write_out(int fd, std::string_view data) { (void)motor::write_all(fd, data.data(), data.size()); }

void print_json_line(const protocol::Message& m) {
  write_out(STDOUT_FILENO, m.raw);
  write_out(STDOUT_FILENO, "\n");
}

std::string job_ref_params(const std::string& job_id, const std::optional<std::string>& secret,
                           std::optional<int64_t> from_seq) {
  protocol::JsonWriter w;
  w.begin_object().field("job_id", job_id);
  if (from_seq) w.field("from_seq", *from_seq);
  if (secret) w.field("secret", *secret);
  w.end_object();
  return w.take();
}

}  // namespace motor::client
