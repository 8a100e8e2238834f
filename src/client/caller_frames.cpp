#include "client/caller_frames.hpp"

#include <simdjson.h>

#include "motor/fd_io.hpp"
#include "protocol/frame.hpp"
#include "protocol/json_writer.hpp"

namespace motor::client {
namespace {

// The detail is the caller's to quote; the vocabulary bounds it at 1,024 bytes (cut at a
// character boundary, so it stays valid UTF-8).
std::string bounded_detail(const std::string& detail) {
  if (detail.size() <= 1024) return detail;
  size_t end = 1024;
  while (end > 0 && (static_cast<unsigned char>(detail[end]) & 0xC0) == 0x80) --end;
  return detail.substr(0, end);
}

// The fields of a refused container that follow "outcome" in key order.
void refusal_fields_after_outcome(protocol::JsonWriter& w, const LocalRefusal& r) {
  if (!r.detail.empty()) w.field("refusal_detail", bounded_detail(r.detail));
  if (r.retry_after_ms) w.field("retry_after_ms", *r.retry_after_ms);
}

void refused_outcome(protocol::JsonWriter& w, const LocalRefusal& r) {
  w.key("outcome").begin_object().field("reason", r.reason).field("type", "refused_before_start").end_object();
}

}  // namespace

bool CallerOutput::send(std::string_view payload) {
  const std::string frame = protocol::encode_frame(payload);
  std::lock_guard lock(mu_);
  if (gone_) return false;
  if (!motor::write_all(fd_, frame.data(), frame.size())) gone_ = true;
  return !gone_;
}

namespace {

// The runner writes "id" first ({"id":N,...}, protocol::with_request_id): such a frame, already
// parsed once by the connection, gets the caller's id spliced in without a second parse.
std::optional<std::string> with_leading_id_replaced(std::string_view frame, int64_t caller_id) {
  constexpr std::string_view kLead = "{\"id\":";
  if (!frame.starts_with(kLead)) return std::nullopt;
  size_t end = kLead.size();
  if (frame.substr(end).starts_with("null")) {
    end += 4;
  } else {
    if (end < frame.size() && frame[end] == '-') ++end;
    const size_t digits = end;
    while (end < frame.size() && frame[end] >= '0' && frame[end] <= '9') ++end;
    if (end == digits) return std::nullopt;
  }
  if (end >= frame.size() || (frame[end] != ',' && frame[end] != '}')) return std::nullopt;
  return std::string(kLead) + std::to_string(caller_id) + std::string(frame.substr(end));
}

}  // namespace

Expected<std::string> with_caller_id(std::string_view frame, int64_t caller_id) {
  if (auto spliced = with_leading_id_replaced(frame, caller_id)) return std::move(*spliced);
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(frame.data(), frame.size()).get_object().get(obj)) {
    return Error{"protocol", "the runner sent a frame that is not a JSON object"};
  }
  protocol::JsonWriter w;
  w.begin_object();
  for (auto [key, value] : obj) {
    if (key == "id") w.field("id", caller_id);
    else w.field_raw(key, simdjson::minify(value));
  }
  w.end_object();
  return w.take();
}

std::string refusal_terminal(int64_t caller_id, const std::string& job_id, const LocalRefusal& r) {
  protocol::JsonWriter w;
  w.begin_object().field("bundle_bytes", r.bundle_bytes).field("id", caller_id).field("job_id", job_id);
  refused_outcome(w, r);
  w.field("queue_wait_ms", 0).field("ran", "none");
  refusal_fields_after_outcome(w, r);
  w.field("tree_hash", r.tree_hash).field("type", "terminal").field("wall_ms", 0).field_null("workspace_changes");
  w.end_object();
  return w.take();
}

std::string refusal_prepare_reply(int64_t caller_id, const std::string& transfer_id, const LocalRefusal& r) {
  protocol::JsonWriter w;
  w.begin_object().field("id", caller_id).key("result").begin_object();
  refused_outcome(w, r);
  refusal_fields_after_outcome(w, r);
  w.field("transfer_id", transfer_id).end_object().end_object();
  return w.take();
}

std::string unreachable_status_reply(int64_t caller_id) {
  protocol::JsonWriter w;
  w.begin_object().field("id", caller_id).key("result").begin_object().field("queue_depth", 0);
  w.key("repositories").begin_array().end_array().key("running_jobs").begin_array().end_array();
  w.field("rustc_version", "").field("server_reachable", false).end_object().end_object();
  return w.take();
}

}  // namespace motor::client
