// The runner's job table (state.db) for a test to look into.
#pragma once

#include <string>

namespace motor::test {

// The table in state.json's form (encode_state), or the reason it could not be read.
std::string state_text(const std::string& state_dir);

}  // namespace motor::test
