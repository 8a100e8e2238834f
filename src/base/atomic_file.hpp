// Replaces a file so that a crash leaves either the old or the new content, never a mix:
// a temp file beside it, fsync, rename over it, fsync the directory.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor {

Status write_file_atomically(const std::string& path, std::string_view text, mode_t mode);

}  // namespace motor
