#include "runner/method_table.hpp"

namespace motor::runner {

bool MethodTable::add(std::string method, Handler handler) {
  return handlers_.emplace(std::move(method), std::move(handler)).second;
}

const MethodTable::Handler* MethodTable::find(std::string_view method) const {
  auto it = handlers_.find(method);
  return it == handlers_.end() ? nullptr : &it->second;
}

}  // namespace motor::runner
