// The exec-remote/v1 vocabulary as the conformance suite checks it: its fixtures (written from
// the README of cortexkit-exec-remote-types 0.2.x, test/conformance/fixtures), the fields each
// shape declares, and canonical JSON (keys sorted, no whitespace) to compare encodings with.
// Tests only.
#pragma once

#include <simdjson.h>

#include <set>
#include <string>
#include <vector>

namespace motor::test::vocabulary {

// A fixture's text: fixtures/<kind>/<name>.json.
std::string fixture(const std::string& kind, const std::string& name);
// The names (without .json) of fixtures/<kind>/, sorted.
std::vector<std::string> fixture_names(const std::string& kind);

// `json` with object keys sorted at every level and no whitespace ("<invalid json>" if it is not
// JSON). With `only`, top-level keys outside it are dropped (Motor's (ext) fields).
std::string canonical(const std::string& json, const std::set<std::string>& only = {});

// The fields each record and reply declares (types.rs). Anything else a Motor record carries is
// an (ext) field, which a caller ignores.
extern const std::set<std::string> kTerminalFields, kAcceptedFields, kStartedFields, kOutputFields, kPrepareReplyFields,
    kStatusReplyFields;

// Whether `actual` has `expected`'s shape: the same keys in every object (recursively), the same
// JSON type for each value, and array items shaped like the expected's first item. Values may
// differ. "" when it does, else what differs.
std::string shape_difference(const std::string& actual, const std::string& expected, const std::set<std::string>& only = {});

}  // namespace motor::test::vocabulary
