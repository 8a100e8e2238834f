#include "vm/guest_file_read.hpp"

#include <algorithm>
#include <memory>

#include <uv.h>

#include "vm/qga_protocol.hpp"

namespace motor::vm {
namespace {

struct Reading {
  QgaClient& agent;
  simdjson::dom::parser& parser;
  GuestFileRead spec;
  std::function<void(Expected<std::string>)> done;
  int64_t handle = -1;
  std::string data;
  uint64_t deadline_ns = 0;
  // What is left of the whole read's time, for the next request (at least 1 ms: the agent's
  // own timeout then ends it).
  uint64_t remaining_ms() const {
    const uint64_t now = uv_hrtime();
    return now >= deadline_ns ? 1 : std::max<uint64_t>(1, (deadline_ns - now) / 1000000);
  }
};

// Closes the guest's handle (its answer does not matter), then reports.
void finish(const std::shared_ptr<Reading>& r, Expected<std::string> result) {
  r->agent.request(qga_file_close(r->handle), r->remaining_ms(), [r, result = std::move(result)](Expected<std::string>) mutable {
    r->done(std::move(result));
  });
}

void read_more(const std::shared_ptr<Reading>& r) {
  // One byte more than allowed is enough to know the file is too long.
  const int64_t want = std::min<int64_t>(r->spec.chunk_bytes, static_cast<int64_t>(r->spec.max_bytes + 1 - r->data.size()));
  r->agent.request(qga_file_read(r->handle, want), r->remaining_ms(), [r, want](Expected<std::string> m) {
    auto chunk = m ? qga_parse_file_read(r->parser, *m, static_cast<size_t>(want)) : Expected<QgaFileChunk>(m.error());
    if (!chunk) return r->done(chunk.error());  // the agent connection is broken now: no close
    r->data += chunk->bytes;
    if (r->data.size() > r->spec.max_bytes) {
      return finish(r, make_error("guest_file", r->spec.path + " is over " + std::to_string(r->spec.max_bytes) + " bytes"));
    }
    if (chunk->eof || chunk->bytes.empty()) return finish(r, std::move(r->data));
    read_more(r);
  });
}

}  // namespace

void read_guest_file(QgaClient& agent, simdjson::dom::parser& parser, GuestFileRead spec,
                     std::function<void(Expected<std::string>)> done) {
  auto r = std::make_shared<Reading>(Reading{agent, parser, std::move(spec), std::move(done), -1, {}, 0});
  r->deadline_ns = uv_hrtime() + r->spec.timeout_ms * 1000000;
  r->agent.request(qga_file_open(r->spec.path, "r"), r->remaining_ms(), [r](Expected<std::string> m) {
    auto h = m ? qga_parse_int_return(r->parser, *m) : Expected<int64_t>(m.error());
    if (!h) return r->done(make_error("guest_file", "opening " + r->spec.path + ": " + h.error().message));
    r->handle = *h;
    read_more(r);
  });
}

}  // namespace motor::vm
