// Standard padded base64 (RFC 4648 section 4), for raw output bytes in records.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace motor::protocol {

std::string base64_encode(std::string_view bytes);
void base64_append(std::string& out, std::string_view bytes);
// nullopt on any character outside the alphabet, bad padding or a bad length.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace motor::protocol
