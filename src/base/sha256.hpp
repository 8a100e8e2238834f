// SHA-256 (FIPS 180-4), for direct-job secrets: the runner keeps only the digest.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace motor {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
std::string to_hex(const Sha256Digest& digest);
// Parses 64 hex digits; false on anything else.
bool from_hex(std::string_view hex, Sha256Digest& out);
// Compares two digests in time independent of where they differ.
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

}  // namespace motor
