// libFuzzer: the Git bundle header the runner reads from a client's upload (parse_bundle_header)
// before the pack goes to `git index-pack`.
// Checks: no crash or sanitizer report; errors are bundle_rejected with a reason; an accepted
// header names at least one ref, every id is 40 hex digits, and the pack starts at pack_offset
// inside the input; a header made by format_bundle_header from what was parsed parses the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "protocol/git_bundle.hpp"
#include "protocol/messages.hpp"

using motor::fuzz::check;

namespace p = motor::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view head(reinterpret_cast<const char*>(data), std::min(size, p::kMaxBundleHeaderBytes));
  auto h = p::parse_bundle_header(head);
  if (!h) {
    check(h.error().code == "bundle_rejected" && !h.error().message.empty());
    return 0;
  }
  check(!h->refs.empty());
  check(h->pack_offset + 4 <= head.size() && head.substr(h->pack_offset, 4) == "PACK");
  for (const auto& id : h->prerequisites) check(id.size() == 40 && p::is_object_id(id));
  for (const auto& r : h->refs) check(r.id.size() == 40 && p::is_object_id(r.id) && !r.name.empty());
  // What the client would write for the first ref and these prerequisites reads back the same.
  const std::string again = p::format_bundle_header(h->refs[0].id, h->refs[0].name, h->prerequisites) + "PACK";
  auto h2 = p::parse_bundle_header(again);
  check(h2.ok());
  check(h2->refs.size() == 1 && h2->refs[0].id == h->refs[0].id && h2->refs[0].name == h->refs[0].name);
  check(h2->prerequisites == h->prerequisites && h2->pack_offset + 4 == again.size());
  return 0;
}
