#include "client/prepare_reply.hpp"

#include <simdjson.h>

namespace motor::client {

std::optional<PrepareOutcome> read_prepare_outcome(simdjson::dom::parser& parser, const std::string& raw) {
  simdjson::dom::element result;
  if (parser.parse(raw)["result"].get(result)) return std::nullopt;
  simdjson::dom::element outcome;
  if (result["outcome"].get(outcome) || outcome.is_null()) return std::nullopt;
  PrepareOutcome out;
  std::string_view type, reason, detail, tree;
  if (outcome["type"].get_string().get(type)) {}
  out.raw = raw;
  out.prepared = type == "prepared";
  if (!outcome["reason"].get_string().get(reason)) out.reason = std::string(reason);
  // An outcome this client does not know: never prepared; its name is what we can say of it.
  if (!out.prepared && type != "refused_before_start") {
    out.unknown_type = std::string(type);
    out.reason = "an outcome this client does not know: " + out.unknown_type;
  }
  if (!result["refusal_detail"].get_string().get(detail)) out.detail = std::string(detail);
  if (!result["tree_hash"].get_string().get(tree)) out.tree_hash = std::string(tree);
  int64_t n = 0;
  if (!result["bundle_bytes"].get_int64().get(n)) out.bundle_bytes = n;
  if (!result["fetch_ms"].get_int64().get(n)) out.fetch_ms = n;
  if (!result["checkout_ms"].get_int64().get(n)) out.checkout_ms = n;
  // Transient only when the hint is there: a missing key is not a null one.
  uint64_t hint = 0;
  out.transient = !result["retry_after_ms"].get_uint64().get(hint);
  return out;
}

}  // namespace motor::client
