// The job starter's wire form of a SandboxConfig (src/sandbox/sandbox_codec.hpp): every field
// round-trips. Each field is bound by name below, so a field added to SandboxConfig breaks the
// build here until it has a mutation (and so a round-trip check) of its own; a field the codec
// drops fails its round-trip.
#include "sandbox/sandbox_codec.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace motor::sandbox {
namespace {

// What travels of a network plan (its fd travels beside the body; newlink is rebuilt from it).
auto carried(const std::optional<JobNetworkPlan>& n) {
  return n ? std::make_tuple(true, std::string(n->job_ifname), std::string(n->egress_ifname), n->job_address, n->gateway,
                             n->prefix)
           : std::make_tuple(false, std::string(), std::string(), Ipv4{0}, Ipv4{0}, 0);
}

// Every field of a SandboxConfig, by name: the structured binding fails to compile when one is
// added or removed.
auto fields(const SandboxConfig& box) {
  const auto& [toolchain, workspace, writable, read_only, overlaid, tmp_size_bytes, tmp_source, shm_size_bytes, hostname, uid, gid,
               user_name, group_name, init_path, network, deny_sockets, symlinks, mask_special_git_files,
               own_user_namespace, workspace_later] = box;
  return std::make_tuple(toolchain, workspace, writable, read_only, overlaid, tmp_size_bytes, tmp_source, shm_size_bytes, hostname,
                         uid, gid, user_name, group_name, init_path, carried(network), deny_sockets, symlinks,
                         mask_special_git_files, own_user_namespace, workspace_later);
}

JobNetworkPlan a_network() {
  JobNetworkPlan n;
  std::strcpy(n.job_ifname, "eth0");
  std::strcpy(n.egress_ifname, "mjv7");
  n.job_address = 0x0a000102;
  n.gateway = 0x0a000101;
  n.prefix = 29;
  return n;
}

// One change from the default per field, in the order of `fields`.
const std::vector<std::pair<const char*, std::function<void(SandboxConfig&)>>>& mutations() {
  static const std::vector<std::pair<const char*, std::function<void(SandboxConfig&)>>> all = {
      {"toolchain", [](SandboxConfig& b) { b.toolchain = {{"/opt/rust", true}, {"/usr", false}}; }},
      {"workspace", [](SandboxConfig& b) { b.workspace = BindMount("/ws", "/workspace", IdMap{1, 2, 3, 4}); }},
      {"writable", [](SandboxConfig& b) { b.writable = {BindMount("/t", "/workspace/target")}; }},
      {"read_only",
       [](SandboxConfig& b) { b.read_only = {BindMount("/a", ""), BindMount("/b", "/c", IdMap{1001, 1002, 1003, 1004})}; }},
      {"overlaid",
       [](SandboxConfig& b) { b.overlaid = {BindMount("/cache/a", ""), BindMount("/cache/b", "/b", IdMap{991, 1002, 992, 1004})}; }},
      {"tmp_size_bytes", [](SandboxConfig& b) { b.tmp_size_bytes = 12345; }},
      {"tmp_source", [](SandboxConfig& b) { b.tmp_source = "/var/tmp/bb"; }},
      {"shm_size_bytes", [](SandboxConfig& b) { b.shm_size_bytes = 678; }},
      {"hostname", [](SandboxConfig& b) { b.hostname = "other-host"; }},
      {"uid", [](SandboxConfig& b) { b.uid = 4242; }},
      {"gid", [](SandboxConfig& b) { b.gid = 4343; }},
      {"user_name", [](SandboxConfig& b) { b.user_name = "motor-prep"; }},
      {"group_name", [](SandboxConfig& b) { b.group_name = "motor-prep-group"; }},
      {"init_path", [](SandboxConfig& b) { b.init_path = "/usr/lib/motor/motor-init"; }},
      {"network", [](SandboxConfig& b) { b.network = a_network(); }},
      {"deny_sockets", [](SandboxConfig& b) { b.deny_sockets = true; }},
      {"symlinks", [](SandboxConfig& b) { b.symlinks = {{"/stage/a", "../b"}, {"/stage/c", "/d"}}; }},
      {"mask_special_git_files", [](SandboxConfig& b) { b.mask_special_git_files = true; }},
      {"own_user_namespace", [](SandboxConfig& b) { b.own_user_namespace = true; }},
      {"workspace_later", [](SandboxConfig& b) { b.workspace_later = true; }},
  };
  return all;
}

SandboxConfig round_trip(const SandboxConfig& box) {
  WireWriter w;
  encode_sandbox_config(w, box);
  WireReader r(w.bytes());
  SandboxConfig out;
  out.toolchain.clear();
  EXPECT_TRUE(decode_sandbox_config(r, out));
  EXPECT_TRUE(r.at_end());
  return out;
}

TEST(SandboxCodec, EveryFieldHasAMutation) {
  EXPECT_EQ(mutations().size(), std::tuple_size_v<decltype(fields(SandboxConfig{}))>);
}

TEST(SandboxCodec, EachFieldRoundTripsOnItsOwn) {
  const SandboxConfig defaults;
  for (const auto& [name, mutate] : mutations()) {
    SandboxConfig box;
    mutate(box);
    ASSERT_NE(fields(box), fields(defaults)) << name << ": its mutation changes nothing";
    EXPECT_EQ(fields(round_trip(box)), fields(box)) << name << " is lost on the way to the job starter";
  }
}

TEST(SandboxCodec, AFullyPopulatedConfigRoundTrips) {
  SandboxConfig box;
  for (const auto& m : mutations()) m.second(box);
  EXPECT_EQ(fields(round_trip(box)), fields(box));
  EXPECT_EQ(round_trip(box).read_only.at(1).idmap, (IdMap{1001, 1002, 1003, 1004}));
  EXPECT_EQ(round_trip(box).overlaid.at(1).idmap, (IdMap{991, 1002, 992, 1004}));
}

TEST(SandboxCodec, ATruncatedBodyIsRefused) {
  SandboxConfig box;
  for (const auto& m : mutations()) m.second(box);
  WireWriter w;
  encode_sandbox_config(w, box);
  const std::string whole = w.bytes();
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string part = whole.substr(0, n);
    WireReader r(part);
    SandboxConfig out;
    EXPECT_FALSE(decode_sandbox_config(r, out)) << "a body cut at byte " << n << " of " << whole.size() << " was taken";
  }
}

TEST(SandboxCodec, TheSpawnSpecRoundTrips) {
  SpawnSpec spec;
  spec.executable = "/.motor/motor-init";
  spec.argv = {"motor-init", "--", "sh", "-c", "echo hi"};
  spec.env = {"PATH=/usr/bin", "HOME=/workspace"};
  spec.cwd = "/workspace/sub";
  spec.uid = 2001;
  spec.gid = 2002;
  spec.die_with_parent = true;
  WireWriter w;
  encode_spawn_spec(w, spec);
  WireReader r(w.bytes());
  SpawnSpec out;
  ASSERT_TRUE(decode_spawn_spec(r, out));
  EXPECT_TRUE(r.at_end());
  EXPECT_EQ(std::tie(out.executable, out.argv, out.env, out.cwd, out.uid, out.gid, out.die_with_parent),
            std::tie(spec.executable, spec.argv, spec.env, spec.cwd, spec.uid, spec.gid, spec.die_with_parent));
}

}  // namespace
}  // namespace motor::sandbox
