// A small expected-style result: a value or an Error carrying a code and a reason.
// C++20 has no std::expected; this is what crosses module edges instead of exceptions.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace motor {

struct Error {
  std::string code;     // machine-readable: "bad_request", "io", "config", ... or a refusal reason
  std::string message;  // for a human: names the problem and, where possible, what to do
};

inline Error make_error(std::string code, std::string message) {
  return Error{std::move(code), std::move(message)};
}

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Expected(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Error error) : error_(std::move(error)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Expected<void>;

}  // namespace motor
