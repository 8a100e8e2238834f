// The QEMU guest agent protocol, as the runner speaks it (pure: no I/O here).
//
// The guest is untrusted: whatever it sends is split into messages with a hard size bound
// before anything is decoded (QgaFramer), and each reply is decoded into a small typed value.
// Commands used: guest-sync-delimited (resynchronise: the agent answers 0xFF then the id),
// guest-exec, guest-exec-status, guest-file-open/read/close.
#pragma once

#include "motor/simdjson_fwd.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"

namespace motor::vm {

// Splits the agent's byte stream into JSON objects by brace depth (strings and escapes
// respected), never holding more than max_message bytes of one. A 0xFF byte (the delimiter
// guest-sync-delimited asks for) discards any partial message.
class QgaFramer {
 public:
  explicit QgaFramer(size_t max_message) : max_(max_message) {}
  // Appends each complete message to `out`. An error (oversized message, bytes outside an
  // object) leaves the stream unusable: the caller ends the VM.
  Status feed(std::string_view bytes, std::vector<std::string>& out);

 private:
  size_t max_;
  std::string cur_;
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
};

// Requests, each one line.
std::string qga_sync_delimited(int64_t id);
std::string qga_exec(const std::string& path, const std::vector<std::string>& args, const std::vector<std::string>& env);
std::string qga_exec_status(int64_t pid);
std::string qga_file_open(const std::string& path, const std::string& mode);
std::string qga_file_read(int64_t handle, int64_t count);
std::string qga_file_close(int64_t handle);

struct QgaExecStatus {
  bool exited = false;
  std::optional<int64_t> exit_code;
  std::optional<int64_t> signal;
};
struct QgaFileChunk {
  std::string bytes;
  bool eof = false;
};

// Decoders. An agent error reply becomes Error{"guest_agent", its description}.
Expected<int64_t> qga_parse_int_return(simdjson::dom::parser& parser, std::string_view msg);  // sync id, file handle
Expected<int64_t> qga_parse_exec(simdjson::dom::parser& parser, std::string_view msg);        // {"pid":N}
Expected<QgaExecStatus> qga_parse_exec_status(simdjson::dom::parser& parser, std::string_view msg);
// `max_bytes`: the most this read asked for; a reply carrying more is refused.
Expected<QgaFileChunk> qga_parse_file_read(simdjson::dom::parser& parser, std::string_view msg, size_t max_bytes);

// Makes output valid UTF-8 across chunk boundaries: a multi-byte sequence split between two
// reads is held back and completed by the next; anything invalid becomes U+FFFD.
class Utf8Sanitizer {
 public:
  std::string feed(std::string_view bytes);
  std::string flush();  // at the end: an incomplete tail becomes U+FFFD

 private:
  std::string tail_;
};

}  // namespace motor::vm
