// The protocol's methods, by name: the server looks each request's method up here once and calls
// its handler. Adding a method is one entry (Runner::register_methods) and its handler.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "protocol/messages.hpp"

namespace motor::runner {

class Session;

class MethodTable {
 public:
  using Handler = std::function<void(Session&, const protocol::Request&)>;

  // A method is added once; adding it again is a programming error (false, the first one stays).
  bool add(std::string method, Handler handler);
  // The handler of `method`, or null for a method this runner does not have.
  const Handler* find(std::string_view method) const;
  size_t size() const { return handlers_.size(); }

 private:
  std::map<std::string, Handler, std::less<>> handlers_;
};

}  // namespace motor::runner
