// The runner's answers to workspace.prepare/upload/finish, as the client reads them: the final
// outcome once there is one, with the catch-all exec-remote/v1 defines for an outcome this client
// does not know (never prepared).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "motor/simdjson_fwd.hpp"

namespace motor::client {

struct PrepareOutcome {
  bool prepared = false;
  std::string reason, detail;  // a refusal: its reason, or the wire name of an outcome we do not know
  std::string unknown_type;    // the outcome's "type" when this client does not know it
  bool transient = false;      // the reply carried retry_after_ms
  int64_t bundle_bytes = 0;
  std::string tree_hash;
  int64_t fetch_ms = 0, checkout_ms = 0;  // the runner's two steps
  bool unchanged = false;      // the client's fingerprint vouched for the tree: no git ran (issue 20)
  std::string raw;             // the final reply as received
};

// The final outcome in a reply frame; nullopt when it has none yet (a bundle is wanted).
std::optional<PrepareOutcome> read_prepare_outcome(simdjson::dom::parser& parser, const std::string& raw);

}  // namespace motor::client
