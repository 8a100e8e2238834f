// libFuzzer: a request as a client could send it, through every decoder the runner applies to it:
// parse_request, then each method's params parser on its params (exec.run: parse_run_params;
// exec.attach, exec.cancel, exec.status: parse_job_ref; runner.identify: parse_identify;
// workspace.prepare/upload/finish/drop: parse_workspace_params).
// Checks: no crash or sanitizer report; errors are always bad_request with a message; what is
// accepted respects the documented bounds.
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "protocol/messages.hpp"

using motor::fuzz::check;

namespace p = motor::protocol;

namespace {

template <typename T>
void check_error(const motor::Expected<T>& e) {
  if (!e) check(e.error().code == "bad_request" && !e.error().message.empty());
}

void params_decoders(simdjson::dom::parser& parser, std::string_view params) {
  constexpr size_t kLimit = 4096;
  auto run = p::parse_run_params(parser, params, kLimit);
  check_error(run);
  if (run) {
    check(run->command.has_value() != !run->argv.empty());
    check(!run->command || !run->command->empty());
    check(run->argv.empty() || !run->argv[0].empty());
    // Parsed once into enums: each value is one the wire names.
    check(p::parse_network(p::to_wire(run->network)) == run->network);
    check(p::parse_platform(p::to_wire(run->platform)) == run->platform);
    check(p::parse_priority(p::to_wire(run->priority)) == run->priority);
    check(!run->timeout_s || *run->timeout_s >= 1);
    check(!run->cpus || (*run->cpus >= 1 && *run->cpus <= 4096));
    check(!run->memory_bytes || *run->memory_bytes > 0);
    check(run->siblings.size() <= 64);
    size_t total = run->command ? run->command->size() : 0;
    for (const auto& a : run->argv) {
      check(a.find('\0') == std::string::npos);
      total += a.size() + 1;
    }
    for (const auto& [k, v] : run->env) total += k.size() + v.size() + 2;
    check(total <= kLimit);
  }
  for (bool required : {true, false}) {
    auto ref = p::parse_job_ref(parser, params, required);
    check_error(ref);
    if (ref) {
      check(ref->from_seq >= 1);
      check(ref->job_id.empty() ? !required : p::is_job_id(ref->job_id));
    }
  }
  auto caller = p::parse_identify(parser, params);
  check_error(caller);
  if (caller) check(!caller->empty() && caller->size() <= 64);
  auto workspace = p::parse_workspace_params(parser, params);
  check_error(workspace);
  if (workspace) {
    check(workspace->tree_hash.empty() || p::is_object_id(workspace->tree_hash));
    check(workspace->commit.empty() || p::is_object_id(workspace->commit));
    check(workspace->transfer_id.empty() || p::is_job_id(workspace->transfer_id));
    check(!workspace->offset || *workspace->offset >= 0);
    check(!workspace->bundle_bytes || *workspace->bundle_bytes >= 0);
    check(workspace->siblings.size() <= 64);
    check(workspace->repository_root.size() <= 4096);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdjson::dom::parser parser;
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  std::optional<int64_t> id;
  auto request = p::parse_request(parser, payload, &id);
  check_error(request);
  if (request) {
    check(id && *id == request->id);
    check(!request->method.empty() && request->method.size() <= 64);
    // params_json is minified, valid JSON: an object.
    simdjson::dom::parser check_parser;
    simdjson::dom::object obj;
    check(check_parser.parse(request->params_json).get_object().get(obj) == simdjson::SUCCESS);
    params_decoders(parser, request->params_json);
  }
  // The params decoders also see raw input: whatever reaches them must not crash them.
  params_decoders(parser, payload);
  // The id the error reply names is reported only when it could be read.
  return 0;
}
