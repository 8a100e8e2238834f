// `motor cache status|clear` (docs/compile-cache.md): the request's params and how its reply is
// printed for a person (--json prints the reply as it came).
#pragma once

#include <string>
#include <string_view>

namespace motor::client {

// cache.clear's params: {} for every repository, else {"repository_root": ...}.
std::string cache_clear_params(const std::string& repository_root);
// A cache.status reply: one line per repository, then the totals and the limits.
void print_cache_status(std::string_view raw);
// A cache.clear reply: what was cleared.
void print_cache_cleared(std::string_view raw);

}  // namespace motor::client
