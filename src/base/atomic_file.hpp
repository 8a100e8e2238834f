// Replaces a file so that a crash leaves either the old or the new content, never a mix:
// a temp file beside it, fsync, rename over it, fsync the directory.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor {

Status write_file_atomically(const std::string& path, std::string_view text, mode_t mode);

// Reads back a small file such a write made (a record, a stamp): at most about `max` bytes, the
// last path component not followed if it is a symlink; nullopt when it cannot be opened.
std::optional<std::string> read_small_file(const std::string& path, size_t max = 65536);

}  // namespace motor
