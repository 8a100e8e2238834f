// DNS messages for the outbound jobs' resolver (issue 9): a job's query is checked before it is
// forwarded, and an upstream answer is parsed with every field's bounds checked, then re-encoded
// without the addresses the network policy would drop (every AAAA: jobs have no IPv6; every A
// the policy drops). A name left with no address answers with none. Anything malformed is an
// error and the answer is dropped, never forwarded as it came.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"

namespace motor::netpolicy {

struct DnsQuery {
  uint16_t id = 0;
  std::string qname;    // wire form, lower-cased (labels with length bytes, root byte included)
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  size_t udp_limit = 512;  // what the client takes over UDP (EDNS0 payload size, 512..4096)
  size_t question_end = 0; // offset just past the question in the query
};

// A standard query with exactly one question (and at most an OPT record).
Expected<DnsQuery> parse_dns_query(std::string_view message);

// `query` with its id replaced (what goes upstream).
std::string with_dns_id(std::string_view message, uint16_t id);

// Re-encodes an upstream `response` to `query` (sent upstream with `upstream_id`) for the
// client: its id restored, its question checked, the addresses `drops` says are blocked removed,
// names decompressed. A result longer than `limit` becomes an empty answer with TC set (the
// client retries over TCP). Errors: the response is malformed or answers something else.
Expected<std::string> filter_dns_response(std::string_view response, const DnsQuery& query, uint16_t upstream_id,
                                          const std::function<bool(uint32_t ipv4_host_order)>& drops, size_t limit);

// A standard query for `name` (dotted, e.g. "example.com") and type `qtype`, recursion desired.
Expected<std::string> make_dns_query(uint16_t id, std::string_view name, uint16_t qtype = 1);
// The A addresses in the answer section of a message filter_dns_response produced.
std::vector<uint32_t> dns_answer_addresses(std::string_view filtered);

// SERVFAIL (rcode 2) for `query`: the answer when no upstream gave a usable one.
std::string dns_failure(std::string_view query_message, const DnsQuery& query);

}  // namespace motor::netpolicy
