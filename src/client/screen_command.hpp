// `motor screen`: may this change be executed at all? (docs/change-screen.md). Reads the change
// with git in the current checkout (or a diff git printed, from a file or stdin) and prints the
// verdict of src/screen with one reason per file.
#pragma once

#include <optional>
#include <string>

namespace motor::client {

inline constexpr int kScreenMayExecute = 0;
inline constexpr int kScreenDoNotExecute = 1;
inline constexpr int kScreenError = 2;  // an error: DO NOT EXECUTE, and the output says so

struct ScreenRequest {
  std::string range;                     // "BASE..HEAD"
  std::optional<std::string> diff_file;  // --diff FILE
  bool from_stdin = false;               // --stdin
  bool json = false;
};

int run_screen(const ScreenRequest& request);

// The usage error of a screen command line, printed the way every screen error is (DO NOT
// EXECUTE first); returns kScreenError.
int screen_usage_error(const std::string& message, bool json);

}  // namespace motor::client
