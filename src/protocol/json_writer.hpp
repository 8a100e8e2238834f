// Writes one JSON value into a string, encoded with fmt. Strings are escaped and any invalid
// UTF-8 in them is replaced by U+FFFD, so what leaves the runner is always valid JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace motor::protocol {

void append_json_string(std::string& out, std::string_view text);

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);
  JsonWriter& string(std::string_view text);
  JsonWriter& number(int64_t value);
  JsonWriter& number(uint64_t value);
  JsonWriter& number(int value) { return number(static_cast<int64_t>(value)); }
  JsonWriter& number(double value);
  JsonWriter& boolean(bool value);
  JsonWriter& null();
  // Inserts already-encoded JSON (must be one valid value).
  JsonWriter& raw(std::string_view json);
  // Base64 of raw bytes, as a JSON string.
  JsonWriter& base64(std::string_view bytes);

  // key + value shorthands
  template <typename T>
  JsonWriter& field(std::string_view name, const T& value) {
    key(name);
    return put(value);
  }
  JsonWriter& field_null(std::string_view name) { return key(name).null(); }
  JsonWriter& field_raw(std::string_view name, std::string_view json) { return key(name).raw(json); }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void separate();
  JsonWriter& put(std::string_view v) { return string(v); }
  JsonWriter& put(const std::string& v) { return string(v); }
  JsonWriter& put(const char* v) { return string(v); }
  JsonWriter& put(bool v) { return boolean(v); }
  JsonWriter& put(int v) { return number(static_cast<int64_t>(v)); }
  JsonWriter& put(long v) { return number(static_cast<int64_t>(v)); }
  JsonWriter& put(long long v) { return number(static_cast<int64_t>(v)); }
  JsonWriter& put(unsigned v) { return number(static_cast<uint64_t>(v)); }
  JsonWriter& put(unsigned long v) { return number(static_cast<uint64_t>(v)); }
  JsonWriter& put(unsigned long long v) { return number(static_cast<uint64_t>(v)); }
  JsonWriter& put(double v) { return number(v); }
  template <typename T>
  JsonWriter& put(const std::optional<T>& v) {
    return v ? put(*v) : null();
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace motor::protocol
