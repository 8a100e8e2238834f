#include "client/ssh_target.hpp"

#include <charconv>

#include <fmt/format.h>

namespace motor::client {
namespace {

Error bad_url(std::string_view url, std::string_view why) {
  return Error{"usage", fmt::format("{}: {} (expected ssh://[user@]host[:port])", url, why)};
}

bool plain_name(std::string_view s, std::string_view extra) {
  if (s.empty() || s[0] == '-') return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                    c == '_' || extra.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string Endpoint::as_option() const {
  return ssh ? "--host " + ssh->url : "--socket " + socket_path;
}

Expected<SshTarget> parse_ssh_url(std::string_view url) {
  constexpr std::string_view kScheme = "ssh://";
  if (!url.starts_with(kScheme)) return bad_url(url, "only ssh:// is supported");
  std::string_view rest = url.substr(kScheme.size());
  if (rest.ends_with('/')) rest.remove_suffix(1);
  SshTarget t;
  t.url = std::string(url);
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    t.user = std::string(rest.substr(0, at));
    rest = rest.substr(at + 1);
    if (!plain_name(t.user, "")) return bad_url(url, "the user name is empty or has characters ssh would misread");
  }
  std::string_view port;
  bool has_port = false;
  if (rest.starts_with('[')) {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) return bad_url(url, "an IPv6 address needs its closing ]");
    t.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return bad_url(url, "unexpected text after the address");
    has_port = !rest.empty();
    if (has_port) port = rest.substr(1);
    if (!plain_name(t.host, ":")) return bad_url(url, "not an IPv6 address");
  } else {
    const auto colon = rest.find(':');
    t.host = std::string(rest.substr(0, colon));
    has_port = colon != std::string_view::npos;
    if (has_port) port = rest.substr(colon + 1);
    if (!plain_name(t.host, "")) return bad_url(url, "the host name is empty or has characters ssh would misread");
  }
  if (has_port) {
    int p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc{} || end != port.data() + port.size() || p < 1 || p > 65535) return bad_url(url, "the port is not 1-65535");
    t.port = p;
  }
  return t;
}

}  // namespace motor::client
