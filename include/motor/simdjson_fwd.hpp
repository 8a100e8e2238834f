// simdjson's DOM types by name only, for headers that pass a parser or an element by reference:
// simdjson.h is ~170,000 lines after preprocessing (2.5 s of every translation unit that reads
// it, measured), so only the files that parse JSON include it.
#pragma once

namespace simdjson::dom {
class parser;
class element;
}  // namespace simdjson::dom
