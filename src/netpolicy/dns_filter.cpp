#include "netpolicy/dns_filter.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace motor::netpolicy {
namespace {

constexpr size_t kHeader = 12;
constexpr uint16_t kTypeA = 1, kTypeAAAA = 28, kTypeOpt = 41;
constexpr size_t kMaxName = 255;
constexpr int kMaxPointerHops = 64;

Error malformed(const char* what) { return make_error("dns", std::string("malformed DNS message: ") + what); }

uint16_t u16(std::string_view m, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(m[at]) << 8) | static_cast<uint8_t>(m[at + 1]));
}

void put16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xFF));
}

// Reads a (possibly compressed) name at `pos` into its uncompressed wire form. Pointers must go
// strictly backwards (no loops) and the name stays within 255 bytes. `pos` moves past the name
// as it appears at `pos`.
bool read_name(std::string_view m, size_t& pos, std::string& wire) {
  wire.clear();
  size_t p = pos;
  size_t end = 0;
  bool jumped = false;
  int hops = 0;
  for (;;) {
    if (p >= m.size()) return false;
    const uint8_t len = static_cast<uint8_t>(m[p]);
    if ((len & 0xC0) == 0xC0) {
      if (p + 1 >= m.size()) return false;
      const size_t target = (static_cast<size_t>(len & 0x3F) << 8) | static_cast<uint8_t>(m[p + 1]);
      if (!jumped) end = p + 2;
      jumped = true;
      if (target >= p || ++hops > kMaxPointerHops) return false;
      p = target;
      continue;
    }
    if (len & 0xC0) return false;  // extended label types: not in use
    if (len == 0) {
      wire.push_back('\0');
      if (!jumped) end = p + 1;
      break;
    }
    if (p + 1 + len > m.size() || wire.size() + 1 + len + 1 > kMaxName) return false;
    wire.append(m.substr(p, 1 + static_cast<size_t>(len)));
    p += 1 + static_cast<size_t>(len);
  }
  pos = end;
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

// RDATA layouts with embedded (compressible) names, RFC 1035 and RFC 3597 section 4: a name,
// or a fixed number of bytes. Types not listed are copied verbatim (newer types never compress).
struct Part {
  bool name;
  uint8_t fixed;
};
struct Layout {
  uint16_t type;
  std::array<Part, 3> parts;
  int count;
};
constexpr Layout kLayouts[] = {
    {2, {{{true, 0}}}, 1},   {3, {{{true, 0}}}, 1},   {4, {{{true, 0}}}, 1},  {5, {{{true, 0}}}, 1},
    {7, {{{true, 0}}}, 1},   {8, {{{true, 0}}}, 1},   {9, {{{true, 0}}}, 1},  {12, {{{true, 0}}}, 1},
    {39, {{{true, 0}}}, 1},  {6, {{{true, 0}, {true, 0}, {false, 20}}}, 3},
    {14, {{{true, 0}, {true, 0}}}, 2}, {17, {{{true, 0}, {true, 0}}}, 2},
    {15, {{{false, 2}, {true, 0}}}, 2}, {18, {{{false, 2}, {true, 0}}}, 2}, {21, {{{false, 2}, {true, 0}}}, 2},
    {36, {{{false, 2}, {true, 0}}}, 2}, {33, {{{false, 6}, {true, 0}}}, 2},
    {26, {{{false, 2}, {true, 0}, {true, 0}}}, 3},
};
// Obsolete types whose names may be compressed in ways not worth decoding: dropped.
constexpr uint16_t kDroppedTypes[] = {24 /* SIG */, 30 /* NXT */};

const Layout* layout_of(uint16_t type) {
  for (const Layout& l : kLayouts) {
    if (l.type == type) return &l;
  }
  return nullptr;
}

// Copies RDATA at [at, at+len) into `out`, decompressing names per its type's layout.
bool copy_rdata(std::string_view m, uint16_t type, size_t at, size_t len, std::string& out) {
  const Layout* layout = layout_of(type);
  if (!layout) {
    out.append(m.substr(at, len));
    return true;
  }
  const size_t end = at + len;
  size_t pos = at;
  std::string name;
  for (int i = 0; i < layout->count; ++i) {
    const Part& part = layout->parts[static_cast<size_t>(i)];
    if (part.name) {
      // A name inside RDATA may point anywhere earlier, but must itself end inside the RDATA.
      if (!read_name(m.substr(0, end), pos, name)) return false;
      out += name;
    } else {
      if (pos + part.fixed > end) return false;
      out.append(m.substr(pos, part.fixed));
      pos += part.fixed;
    }
  }
  return pos == end;
}

}  // namespace

Expected<DnsQuery> parse_dns_query(std::string_view m) {
  if (m.size() < kHeader || m.size() > 65535) return malformed("size");
  const uint16_t flags = u16(m, 2);
  if (flags & 0x8000) return malformed("not a query");
  if (((flags >> 11) & 0xF) != 0) return make_error("dns", "only standard queries are answered");
  if (u16(m, 4) != 1 || u16(m, 6) != 0 || u16(m, 8) != 0 || u16(m, 10) > 1) return malformed("counts");
  DnsQuery q;
  q.id = u16(m, 0);
  size_t pos = kHeader;
  if (!read_name(m, pos, q.qname) || pos + 4 > m.size()) return malformed("question");
  q.qname = lower(q.qname);
  q.qtype = u16(m, pos);
  q.qclass = u16(m, pos + 2);
  pos += 4;
  q.question_end = pos;
  if (u16(m, 10) == 1) {
    std::string name;
    if (!read_name(m, pos, name) || pos + 10 > m.size()) return malformed("additional record");
    const uint16_t type = u16(m, pos);
    const size_t rdlen = u16(m, pos + 8);
    if (pos + 10 + rdlen != m.size()) return malformed("additional record length");
    if (type == kTypeOpt && name.size() == 1) q.udp_limit = std::clamp<size_t>(u16(m, pos + 2), 512, 4096);
    pos += 10 + rdlen;
  }
  if (pos != m.size()) return malformed("trailing bytes");
  return q;
}

std::string with_dns_id(std::string_view message, uint16_t id) {
  std::string out(message);
  if (out.size() >= 2) {
    out[0] = static_cast<char>(id >> 8);
    out[1] = static_cast<char>(id & 0xFF);
  }
  return out;
}

Expected<std::string> filter_dns_response(std::string_view m, const DnsQuery& query, uint16_t upstream_id,
                                          const std::function<bool(uint32_t)>& drops, size_t limit) {
  if (m.size() < kHeader) return malformed("size");
  if (u16(m, 0) != upstream_id) return malformed("id does not match the query");
  const uint16_t flags = u16(m, 2);
  if (!(flags & 0x8000)) return malformed("not a response");
  if (u16(m, 4) != 1) return malformed("question count");
  size_t pos = kHeader;
  std::string name;
  if (!read_name(m, pos, name) || pos + 4 > m.size()) return malformed("question");
  if (lower(name) != query.qname || u16(m, pos) != query.qtype || u16(m, pos + 2) != query.qclass)
    return malformed("answers another question");
  pos += 4;

  std::string question;
  question += name;
  put16(question, query.qtype);
  put16(question, query.qclass);

  std::array<uint16_t, 3> kept{};
  std::string records;
  for (size_t section = 0; section < 3; ++section) {
    const uint16_t count = u16(m, 6 + section * 2);
    for (uint16_t i = 0; i < count; ++i) {
      if (!read_name(m, pos, name) || pos + 10 > m.size()) return malformed("record");
      const uint16_t type = u16(m, pos);
      const size_t rdlen = u16(m, pos + 8);
      const size_t rdata = pos + 10;
      if (rdata + rdlen > m.size()) return malformed("record length");
      const std::string_view fixed = m.substr(pos, 8);  // type, class, TTL
      pos = rdata + rdlen;
      if (type == kTypeA) {
        if (rdlen != 4) return malformed("A record length");
        const uint32_t a = (static_cast<uint32_t>(static_cast<uint8_t>(m[rdata])) << 24) |
                           (static_cast<uint32_t>(static_cast<uint8_t>(m[rdata + 1])) << 16) |
                           (static_cast<uint32_t>(static_cast<uint8_t>(m[rdata + 2])) << 8) |
                           static_cast<uint32_t>(static_cast<uint8_t>(m[rdata + 3]));
        if (drops(a)) continue;
      }
      if (type == kTypeAAAA) {
        if (rdlen != 16) return malformed("AAAA record length");
        continue;  // jobs have no IPv6
      }
      if (std::find(std::begin(kDroppedTypes), std::end(kDroppedTypes), type) != std::end(kDroppedTypes)) continue;
      if (type == kTypeOpt && (section != 2 || name.size() != 1)) return malformed("OPT record");
      std::string record = name;
      record.append(fixed);
      std::string data;
      if (!copy_rdata(m, type, rdata, rdlen, data)) return malformed("record data");
      if (data.size() > 65535) return malformed("record data");
      put16(record, static_cast<uint16_t>(data.size()));
      record += data;
      records += record;
      ++kept[section];
    }
  }
  if (pos != m.size()) return malformed("trailing bytes");

  std::string out;
  put16(out, query.id);
  put16(out, flags);
  put16(out, 1);
  for (uint16_t k : kept) put16(out, k);
  out += question;
  out += records;
  if (out.size() > limit || out.size() > 65535) {
    // Too big for the client's transport: an empty, truncated answer makes it retry over TCP.
    out.resize(kHeader);
    out[2] = static_cast<char>(out[2] | 0x02);
    for (size_t i = 6; i < kHeader; ++i) out[i] = '\0';
    out += question;
  }
  return out;
}

Expected<std::string> make_dns_query(uint16_t id, std::string_view name, uint16_t qtype) {
  std::string out;
  put16(out, id);
  put16(out, 0x0100);
  put16(out, 1);
  put16(out, 0);
  put16(out, 0);
  put16(out, 0);
  size_t total = 0;
  while (!name.empty()) {
    const size_t dot = name.find('.');
    const std::string_view label = name.substr(0, dot);
    if (label.empty() || label.size() > 63 || (total += label.size() + 1) > 253) return malformed("name");
    out.push_back(static_cast<char>(label.size()));
    out.append(label);
    name = dot == std::string_view::npos ? std::string_view{} : name.substr(dot + 1);
  }
  out.push_back('\0');
  put16(out, qtype);
  put16(out, 1);
  return out;
}

std::vector<uint32_t> dns_answer_addresses(std::string_view m) {
  std::vector<uint32_t> out;
  std::string name;
  size_t pos = kHeader;
  if (m.size() < kHeader || !read_name(m, pos, name)) return out;
  pos += 4;
  for (uint16_t i = 0, n = u16(m, 6); i < n; ++i) {
    if (!read_name(m, pos, name) || pos + 10 > m.size()) break;
    const uint16_t type = u16(m, pos);
    const size_t rdlen = u16(m, pos + 8);
    pos += 10;
    if (pos + rdlen > m.size()) break;
    if (type == kTypeA && rdlen == 4) {
      uint32_t a = 0;
      for (size_t k = 0; k < 4; ++k) a = (a << 8) | static_cast<uint8_t>(m[pos + k]);
      out.push_back(a);
    }
    pos += rdlen;
  }
  return out;
}

std::string dns_failure(std::string_view query_message, const DnsQuery& query) {
  std::string out;
  put16(out, query.id);
  const uint16_t rd = query_message.size() >= 4 ? (u16(query_message, 2) & 0x0100) : 0;
  put16(out, static_cast<uint16_t>(0x8000 | rd | 0x0080 | 2));  // QR, RD echoed, RA, SERVFAIL
  put16(out, 1);
  put16(out, 0);
  put16(out, 0);
  put16(out, 0);
  out.append(query_message.substr(kHeader, query.question_end - kHeader));
  return out;
}

}  // namespace motor::netpolicy
