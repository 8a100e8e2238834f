#include "support/state_text.hpp"

#include "runner/state_store.hpp"

namespace motor::test {

std::string state_text(const std::string& state_dir) {
  auto st = runner::load_state(state_dir);
  return st ? runner::encode_state(*st) : st.error().message;
}

}  // namespace motor::test
