#include "protocol/git_bundle.hpp"

#include <fmt/format.h>

#include "protocol/messages.hpp"

namespace motor::protocol {
namespace {

Error rejected(std::string why) { return make_error("bundle_rejected", "not a Git bundle the runner takes: " + why); }

bool is_sha1(std::string_view s) { return s.size() == 40 && is_object_id(s); }

// A ref name as git would take it in a bundle: printable, no spaces or control bytes.
bool plausible_ref(std::string_view s) {
  if (s.empty() || s.size() > 1024) return false;
  for (unsigned char c : s) {
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

Expected<BundleHeader> parse_bundle_header(std::string_view head) {
  BundleHeader h;
  size_t at = 0;
  auto next_line = [&](std::string_view& line) {
    const size_t nl = head.find('\n', at);
    if (nl == std::string_view::npos) return false;
    line = head.substr(at, nl - at);
    at = nl + 1;
    return true;
  };
  std::string_view line;
  if (!next_line(line)) return rejected("no header line");
  const bool v3 = line == "# v3 git bundle";
  if (line != "# v2 git bundle" && !v3) return rejected("unknown signature (a v2 or v3 bundle is needed)");
  for (;;) {
    if (!next_line(line)) {
      return rejected(head.size() >= kMaxBundleHeaderBytes
                          ? fmt::format("the header is longer than {} bytes", kMaxBundleHeaderBytes)
                          : std::string("the header does not end"));
    }
    if (line.empty()) break;
    if (line[0] == '@') {
      // v3 capabilities: only SHA-1 object names (what the mirrors hold); a filter would mean
      // a partial pack.
      if (!v3 || line != "@object-format=sha1") return rejected(fmt::format("unsupported capability {:.64}", line));
      continue;
    }
    if (line[0] == '-') {
      const std::string_view id = line.substr(1, 40);
      if (!is_sha1(id) || (line.size() > 41 && line[41] != ' ')) return rejected("malformed prerequisite line");
      h.prerequisites.emplace_back(id);
      continue;
    }
    const std::string_view id = line.substr(0, 40);
    if (!is_sha1(id) || line.size() < 42 || line[40] != ' ' || !plausible_ref(line.substr(41))) {
      return rejected("malformed ref line");
    }
    h.refs.push_back(BundleRef{std::string(id), std::string(line.substr(41))});
  }
  if (h.refs.empty()) return rejected("it names no ref");
  h.pack_offset = at;
  if (head.size() - at < 4 || head.substr(at, 4) != "PACK") return rejected("no pack after the header");
  return h;
}

std::string format_bundle_header(const std::string& commit, const std::string& ref,
                                 const std::vector<std::string>& prerequisites) {
  std::string out = "# v2 git bundle\n";
  for (const auto& p : prerequisites) out += "-" + p + " motor\n";
  out += commit + " " + ref + "\n\n";
  return out;
}

}  // namespace motor::protocol
