// libFuzzer: the outbound jobs' DNS filter (netpolicy/dns_filter.hpp). A job's query is parsed
// (parse_dns_query) and an upstream's answer to a fixed query is filtered (filter_dns_response).
// Input: byte 0 picks the answer size limit and the address policy; the rest is the message,
// fed both as a job's query and as the upstream's answer.
// Checks: no crash or sanitizer report; a parsed query's question lies inside the message; a
// filtered answer fits the limit, holds no address the policy drops, and filters again to
// itself (the filter's own output is an answer it accepts and leaves as it is).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "netpolicy/dns_filter.hpp"

using motor::fuzz::check;

namespace r = motor::netpolicy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t limit = data[0] & 1 ? 512 : 4096;
  const bool drop_odd = data[0] & 2;
  const std::string_view message(reinterpret_cast<const char*>(data + 1), size - 1);

  if (auto q = r::parse_dns_query(message)) {
    check(q->question_end <= message.size());
    check(!q->qname.empty() && q->qname.back() == '\0');
    check(q->udp_limit >= 512 && q->udp_limit <= 4096);
    check(r::with_dns_id(message, 7).size() == message.size());
    const std::string failure = r::dns_failure(message, *q);
    check(failure.size() >= 12);
  }

  static const std::string query_message = *r::make_dns_query(0x1234, "example.com");
  static const r::DnsQuery query = *r::parse_dns_query(query_message);
  // The upstream id the runner chose: the answer's own, so that the fuzzer gets past the match.
  const uint16_t upstream_id =
      message.size() >= 2 ? static_cast<uint16_t>(static_cast<uint8_t>(message[0]) << 8 | static_cast<uint8_t>(message[1])) : 0;
  const auto drops = [drop_odd](uint32_t addr) { return drop_odd && (addr & 1) != 0; };
  auto filtered = r::filter_dns_response(message, query, upstream_id, drops, limit);
  if (!filtered) return 0;
  check(filtered->size() <= limit);
  for (uint32_t addr : r::dns_answer_addresses(*filtered)) check(!drops(addr));
  auto again = r::filter_dns_response(*filtered, query, query.id, drops, limit);
  check(again.ok() && *again == *filtered);
  return 0;
}
