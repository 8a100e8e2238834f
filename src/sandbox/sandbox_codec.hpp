// The wire form of a SandboxConfig and of a SpawnSpec's carried part, beside the structs it
// encodes: the job starter (sandbox/job_starter.hpp) sends them to its helper process, which plans
// and spawns the sandbox. Every field travels, idmaps included (test/unit/sandbox_codec_test.cpp
// binds each field by name and round-trips it), except what cannot cross a socket as bytes:
//   - JobNetworkPlan::egress_netns_fd travels as an fd beside the body, and the receiver calls
//     use_egress_namespace, which also rebuilds `newlink` (it names the fd by number);
//   - SpawnSpec's fds, cgroup and hooks are the receiver's own (its fds, its plan).
//
// The body: u64 numbers (host order: both ends are this build) and length-prefixed strings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/sandbox_config.hpp"
#include "sandbox/spawn.hpp"

namespace motor::sandbox {

class WireWriter {
 public:
  void num(uint64_t v);
  void str(const std::string& s);
  void strs(const std::vector<std::string>& v);
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Reads what WireWriter wrote; any short or malformed read makes ok() false for good (and the
// values read after it zero or empty).
class WireReader {
 public:
  explicit WireReader(const std::string& in) : in_(in) {}
  bool ok() const { return ok_; }
  void fail() { ok_ = false; }
  uint64_t num();
  std::string str();
  std::vector<std::string> strs();
  bool at_end() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

void encode_sandbox_config(WireWriter& w, const SandboxConfig& box);
// False when the body is malformed (then `box` is unspecified). The network plan, if any, has
// egress_netns_fd -1 and no newlink until use_egress_namespace.
bool decode_sandbox_config(WireReader& r, SandboxConfig& box);

// The spec's executable, argv, env, cwd, uid, gid and die_with_parent.
void encode_spawn_spec(WireWriter& w, const SpawnSpec& spec);
bool decode_spawn_spec(WireReader& r, SpawnSpec& spec);

}  // namespace motor::sandbox
