// IPv4 addresses and ranges as the runner, its config and the job network use them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor {

// An IPv4 address in host byte order (1.2.3.4 = 0x01020304).
using Ipv4 = uint32_t;

struct Cidr {
  Ipv4 base = 0;  // with every host bit zero
  int prefix = 32;
  // The host bits of a /prefix (no shift by 32: that is undefined for a 32-bit value).
  static Ipv4 host_mask(int prefix) { return prefix <= 0 ? 0xFFFFFFFFu : prefix >= 32 ? 0u : 0xFFFFFFFFu >> prefix; }
  bool contains(Ipv4 a) const { return (a & ~host_mask(prefix)) == (base & ~host_mask(prefix)); }
  Ipv4 last() const { return base | host_mask(prefix); }
  bool operator==(const Cidr&) const = default;
};

// Dotted quad, exactly four decimal parts 0..255 without leading zeros ("010.0.0.1" is refused:
// inet_aton would read it as octal).
std::optional<Ipv4> parse_ipv4(std::string_view text);
std::string format_ipv4(Ipv4 a);
// "a.b.c.d/n" (n 0..32) or a bare address (/32). Host bits must be zero.
Expected<Cidr> parse_cidr(std::string_view text);
std::string format_cidr(const Cidr& c);

}  // namespace motor
