// The header of a Git bundle, read by the runner itself so the pack behind it can go straight to
// `git index-pack --stdin` (no `git fetch`, its connectivity walk and its maintenance child).
// Format (gitformat-bundle): "# v2 git bundle" (or v3 with an @object-format=sha1 capability),
// prerequisite lines "-<id>[ comment]", ref lines "<id> <refname>", an empty line, the pack.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "motor/expected.hpp"

namespace motor::protocol {

struct BundleRef {
  std::string id, name;
};

struct BundleHeader {
  std::vector<std::string> prerequisites;
  std::vector<BundleRef> refs;
  size_t pack_offset = 0;  // where the pack begins
};

// The most of a bundle's beginning the runner reads to find its header.
constexpr size_t kMaxBundleHeaderBytes = 256 * 1024;

// Parses the header at the start of `head` (the bundle's first bytes, at most
// kMaxBundleHeaderBytes). Errors have the code "bundle_rejected" and say what is wrong.
Expected<BundleHeader> parse_bundle_header(std::string_view head);

// The header the client writes before the pack: one ref, and the commits the pack leaves out.
std::string format_bundle_header(const std::string& commit, const std::string& ref,
                                 const std::vector<std::string>& prerequisites);

}  // namespace motor::protocol
