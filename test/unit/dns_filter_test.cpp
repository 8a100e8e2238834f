// The outbound resolver's DNS parsing and filtering (src/netpolicy/dns_filter.cpp): what is kept,
// what is removed, and that malformed input of every kind is refused (also under ASan+UBSan,
// with a few thousand random mutations).
#include "netpolicy/dns_filter.hpp"

#include <gtest/gtest.h>

#include <random>

#include "netpolicy/netpolicy.hpp"

namespace motor::netpolicy {
namespace {

std::string u16(uint16_t v) { return std::string{static_cast<char>(v >> 8), static_cast<char>(v & 0xFF)}; }
std::string u32(uint32_t v) { return u16(static_cast<uint16_t>(v >> 16)) + u16(static_cast<uint16_t>(v)); }

std::string name(const std::string& dotted) {
  std::string out;
  size_t at = 0;
  while (at < dotted.size()) {
    size_t dot = dotted.find('.', at);
    if (dot == std::string::npos) dot = dotted.size();
    out.push_back(static_cast<char>(dot - at));
    out += dotted.substr(at, dot - at);
    at = dot + 1;
  }
  return out + std::string(1, '\0');
}

std::string header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar) {
  return u16(id) + u16(flags) + u16(qd) + u16(an) + u16(ns) + u16(ar);
}

std::string query(uint16_t id, const std::string& qname, uint16_t qtype = 1) {
  return header(id, 0x0100, 1, 0, 0, 0) + name(qname) + u16(qtype) + u16(1);
}

std::string rr(const std::string& owner, uint16_t type, const std::string& rdata) {
  return owner + u16(type) + u16(1) + u32(300) + u16(static_cast<uint16_t>(rdata.size())) + rdata;
}

std::string a(uint32_t addr) { return u32(addr); }
constexpr uint32_t kPublic = 0x5DB8D822;   // 93.184.216.34
constexpr uint32_t kPrivate = 0x0A010203;  // 10.1.2.3

bool drops(uint32_t addr) { return netpolicy::EgressPolicy{}.drops(addr); }

std::vector<uint32_t> answers(const std::string& m, uint16_t* count_out = nullptr) {
  if (count_out) *count_out = static_cast<uint16_t>((static_cast<uint8_t>(m[6]) << 8) | static_cast<uint8_t>(m[7]));
  return dns_answer_addresses(m);
}

TEST(DnsFilter, QueriesAreCheckedBeforeTheyAreForwarded) {
  auto q = parse_dns_query(query(7, "Example.COM"));
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->id, 7);
  EXPECT_EQ(q->qname, name("example.com"));
  EXPECT_EQ(q->udp_limit, 512u);
  const std::string opt = std::string(1, '\0') + u16(41) + u16(1232) + u32(0) + u16(0);
  auto e = parse_dns_query(header(8, 0x0100, 1, 0, 0, 1) + name("a.b") + u16(1) + u16(1) + opt);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->udp_limit, 1232u);
  EXPECT_FALSE(parse_dns_query("short"));
  EXPECT_FALSE(parse_dns_query(header(1, 0x8100, 1, 0, 0, 0) + name("a") + u16(1) + u16(1)));  // a response
  EXPECT_FALSE(parse_dns_query(header(1, 0x2100, 1, 0, 0, 0) + name("a") + u16(1) + u16(1)));  // opcode 4
  EXPECT_FALSE(parse_dns_query(header(1, 0x0100, 2, 0, 0, 0) + name("a") + u16(1) + u16(1)));
  EXPECT_FALSE(parse_dns_query(query(1, "a") + "x"));  // trailing bytes
  EXPECT_FALSE(parse_dns_query(header(1, 0x0100, 1, 0, 0, 0) + "\x03" "ab"));  // label past the end
  EXPECT_EQ(with_dns_id(query(1, "a"), 0xBEEF).substr(0, 2), "\xBE\xEF");
}

TEST(DnsFilter, BlockedAndIpv6AddressesAreRemoved) {
  const std::string q = query(0x1111, "mixed.test");
  auto pq = parse_dns_query(q);
  ASSERT_TRUE(pq);
  // Upstream compresses owner names to the question (offset 12).
  const std::string owner = "\xC0\x0C";
  const std::string resp = header(0x2222, 0x8180, 1, 3, 0, 1) + name("mixed.test") + u16(1) + u16(1) +
                           rr(owner, 1, a(kPrivate)) + rr(owner, 1, a(kPublic)) +
                           rr(owner, 28, std::string(16, '\x20')) + rr(owner, 1, a(0xA9FEA9FE));
  auto out = filter_dns_response(resp, *pq, 0x2222, drops, 512);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->substr(0, 2), "\x11\x11");  // the job's own id
  uint16_t an = 0;
  EXPECT_EQ(answers(*out, &an), std::vector<uint32_t>{kPublic});
  EXPECT_EQ(an, 1);
  EXPECT_EQ(static_cast<uint8_t>((*out)[11]), 0);  // the additional A (metadata address) went too

  // Only blocked addresses: an answer with none (NOERROR, no records).
  const std::string only_private = header(0x2222, 0x8180, 1, 1, 0, 0) + name("mixed.test") + u16(1) + u16(1) +
                                   rr(owner, 1, a(kPrivate));
  auto none = filter_dns_response(only_private, *pq, 0x2222, drops, 512);
  ASSERT_TRUE(none);
  EXPECT_TRUE(answers(*none).empty());
  EXPECT_EQ(static_cast<uint8_t>((*none)[3]) & 0x0F, 0);
}

TEST(DnsFilter, NamesInRecordDataAreDecompressed) {
  auto pq = parse_dns_query(query(1, "alias.test"));
  ASSERT_TRUE(pq);
  // CNAME alias.test -> mixed.test (compressed against the question's "test"), then its A.
  const std::string qsec = name("alias.test") + u16(1) + u16(1);
  const std::string cname_rdata = std::string("\x05mixed") + "\xC0\x12";  // "test" at offset 18
  const std::string resp = header(9, 0x8180, 1, 2, 0, 0) + qsec + rr("\xC0\x0C", 5, cname_rdata) +
                           rr("\xC0\x28", 1, a(kPublic));  // owner: the CNAME target at offset 40
  auto out = filter_dns_response(resp, *pq, 9, drops, 512);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_NE(out->find(name("mixed.test")), std::string::npos);
  EXPECT_EQ(answers(*out), std::vector<uint32_t>{kPublic});
  // MX: preference then a name.
  auto mq = parse_dns_query(query(2, "m.test", 15));
  const std::string mresp = header(2, 0x8180, 1, 1, 0, 0) + name("m.test") + u16(15) + u16(1) +
                            rr("\xC0\x0C", 15, u16(10) + "\x04mail\xC0\x0C");
  auto mout = filter_dns_response(mresp, *mq, 2, drops, 512);
  ASSERT_TRUE(mout) << mout.error().message;
  EXPECT_NE(mout->find(u16(10) + "\x04mail\x01m\x04test"), std::string::npos);
}

TEST(DnsFilter, MalformedOrForeignAnswersAreRefused) {
  auto pq = parse_dns_query(query(1, "x.test"));
  ASSERT_TRUE(pq);
  const std::string qsec = name("x.test") + u16(1) + u16(1);
  const std::string h1 = header(5, 0x8180, 1, 1, 0, 0);
  const std::vector<std::pair<const char*, std::string>> bad = {
      {"empty", ""},
      {"header only", header(5, 0x8180, 0, 0, 0, 0)},
      {"wrong id", header(6, 0x8180, 1, 0, 0, 0) + qsec},
      {"not a response", header(5, 0x0100, 1, 0, 0, 0) + qsec},
      {"another question", header(5, 0x8180, 1, 0, 0, 0) + name("y.test") + u16(1) + u16(1)},
      {"another type", header(5, 0x8180, 1, 0, 0, 0) + name("x.test") + u16(28) + u16(1)},
      {"pointer to itself", h1 + qsec + "\xC0\x18" + u16(1) + u16(1) + u32(1) + u16(4) + a(kPublic)},
      {"forward pointer", h1 + qsec + "\xC0\x7F" + u16(1) + u16(1) + u32(1) + u16(4) + a(kPublic)},
      {"pointer loop", header(5, 0x8180, 1, 1, 0, 0) + "\xC0\x0E\xC0\x0C" + u16(1) + u16(1)},
      {"label type 0x40", h1 + qsec + "\x41" + u16(1) + u16(1) + u32(1) + u16(4) + a(kPublic)},
      {"record past the end", h1 + qsec + "\xC0\x0C" + u16(1) + u16(1) + u32(1) + u16(64) + a(kPublic)},
      {"A of 5 bytes", h1 + qsec + rr("\xC0\x0C", 1, a(kPublic) + "x")},
      {"AAAA of 4 bytes", h1 + qsec + rr("\xC0\x0C", 28, a(kPublic))},
      {"more records than bytes", header(5, 0x8180, 1, 9, 0, 0) + qsec + rr("\xC0\x0C", 1, a(kPublic))},
      {"trailing bytes", h1 + qsec + rr("\xC0\x0C", 1, a(kPublic)) + "junk"},
      {"CNAME running out of its data", h1 + qsec + rr("\xC0\x0C", 5, "\x05mixed")},
      {"CNAME with bytes after the name", h1 + qsec + rr("\xC0\x0C", 5, name("a.b") + "z")},
      {"SOA without its numbers", h1 + qsec + rr("\xC0\x0C", 6, name("a") + name("b") + u32(1))},
      {"OPT in the answer section", h1 + qsec + rr(std::string(1, '\0'), 41, "")},
      {"name over 255 bytes", h1 + qsec + [] {
         std::string n;
         for (int i = 0; i < 5; ++i) n += "\x3F" + std::string(63, 'a');
         return n + std::string(1, '\0');
       }() + u16(1) + u16(1) + u32(1) + u16(4) + a(kPublic)},
  };
  for (const auto& [what, msg] : bad) EXPECT_FALSE(filter_dns_response(msg, *pq, 5, drops, 512)) << what;
}

TEST(DnsFilter, TooBigForTheClientBecomesTruncated) {
  auto pq = parse_dns_query(query(3, "big.test"));
  std::string resp = header(3, 0x8180, 1, 100, 0, 0) + name("big.test") + u16(1) + u16(1);
  for (uint32_t i = 0; i < 100; ++i) resp += rr("\xC0\x0C", 1, a(kPublic + i));
  auto out = filter_dns_response(resp, *pq, 3, drops, 512);
  ASSERT_TRUE(out);
  EXPECT_TRUE(static_cast<uint8_t>((*out)[2]) & 0x02);  // TC
  EXPECT_TRUE(answers(*out).empty());
  auto tcp = filter_dns_response(resp, *pq, 3, drops, 65535);
  ASSERT_TRUE(tcp);
  EXPECT_EQ(answers(*tcp).size(), 100u);
}

TEST(DnsFilter, FailureAnswersTheQuestion) {
  const std::string q = query(0x4242, "x.test");
  auto pq = parse_dns_query(q);
  const std::string f = dns_failure(q, *pq);
  EXPECT_EQ(f.substr(0, 2), "\x42\x42");
  EXPECT_EQ(static_cast<uint8_t>(f[3]) & 0x0F, 2);  // SERVFAIL
  EXPECT_EQ(f.substr(12), name("x.test") + u16(1) + u16(1));
}

// Random damage to valid answers never crashes, never reads out of bounds (ASan), and whatever is
// accepted re-encodes without compression.
TEST(DnsFilter, RandomMutationsNeverCrash) {
  auto pq = parse_dns_query(query(1, "mixed.test"));
  const std::string base = header(1, 0x8180, 1, 3, 1, 1) + name("mixed.test") + u16(1) + u16(1) +
                           rr("\xC0\x0C", 5, std::string("\x03www\xC0\x0C")) + rr("\xC0\x1C", 1, a(kPublic)) +
                           rr("\xC0\x0C", 28, std::string(16, 'x')) +
                           rr("\xC0\x0C", 6, std::string("\x02ns\xC0\x0C\x04mail\xC0\x0C") + std::string(20, '\0')) +
                           rr(std::string(1, '\0'), 41, "");
  ASSERT_TRUE(filter_dns_response(base, *pq, 1, drops, 4096)) << filter_dns_response(base, *pq, 1, drops, 4096).error().message;
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string m = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      switch (rng() % 3) {
        case 0: m[rng() % m.size()] = static_cast<char>(rng()); break;
        case 1: m.resize(rng() % (m.size() + 1)); break;
        default: m.insert(rng() % (m.size() + 1), 1, static_cast<char>(rng())); break;
      }
      if (m.empty()) break;
    }
    auto out = filter_dns_response(m, *pq, 1, drops, 4096);
    if (out) {
      ++accepted;
      ASSERT_GE(out->size(), 12u);
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace motor::netpolicy
