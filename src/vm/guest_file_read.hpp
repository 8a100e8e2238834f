// Reads one whole file from the guest through the agent (guest-file-open, bounded
// guest-file-read rounds, guest-file-close), holding at most max_bytes + one chunk: a file that
// turns out longer is refused, not truncated. One request in flight at a time, like every other
// agent exchange of a VM job.
#pragma once

#include "motor/simdjson_fwd.hpp"

#include <cstdint>
#include <functional>
#include <string>

#include "motor/expected.hpp"
#include "vm/qga_client.hpp"

namespace motor::vm {

struct GuestFileRead {
  std::string path;
  size_t max_bytes = 0;
  int64_t chunk_bytes = 64 * 1024;
  uint64_t timeout_ms = 30000;  // for the whole read, every request included
};

// `done` runs once with the file's bytes or why not ("missing", over max_bytes, past timeout_ms,
// an agent error; after a timeout the agent connection is broken).
// If `agent` is destroyed first, `done` never runs (its pending reply goes with it).
void read_guest_file(QgaClient& agent, simdjson::dom::parser& parser, GuestFileRead spec,
                     std::function<void(Expected<std::string>)> done);

}  // namespace motor::vm
