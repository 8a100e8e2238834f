#include "sandbox/sandbox_codec.hpp"

#include <net/if.h>

#include <cstring>
#include <optional>
#include <utility>

namespace motor::sandbox {

void WireWriter::num(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }

void WireWriter::str(const std::string& s) {
  num(s.size());
  out_ += s;
}

void WireWriter::strs(const std::vector<std::string>& v) {
  num(v.size());
  for (const auto& s : v) str(s);
}

uint64_t WireReader::num() {
  uint64_t v = 0;
  if (!ok_ || pos_ + sizeof v > in_.size()) return fail(), 0;
  std::memcpy(&v, in_.data() + pos_, sizeof v);
  pos_ += sizeof v;
  return v;
}

std::string WireReader::str() {
  const uint64_t n = num();
  if (!ok_ || n > in_.size() - pos_) return fail(), std::string();
  std::string s = in_.substr(pos_, n);
  pos_ += n;
  return s;
}

std::vector<std::string> WireReader::strs() {
  const uint64_t n = num();
  std::vector<std::string> v;
  for (uint64_t i = 0; ok_ && i < n; ++i) v.push_back(str());
  return v;
}

namespace {

void put_idmap(WireWriter& w, const std::optional<IdMap>& map) {
  w.num(map ? 1 : 0);
  if (!map) return;
  w.num(map->from_uid);
  w.num(map->to_uid);
  w.num(map->from_gid);
  w.num(map->to_gid);
}

std::optional<IdMap> get_idmap(WireReader& r) {
  if (r.num() == 0) return std::nullopt;
  IdMap map;
  map.from_uid = static_cast<uid_t>(r.num());
  map.to_uid = static_cast<uid_t>(r.num());
  map.from_gid = static_cast<gid_t>(r.num());
  map.to_gid = static_cast<gid_t>(r.num());
  return map;
}

void put_bind(WireWriter& w, const BindMount& b) {
  w.str(b.source);
  w.str(b.target);
  put_idmap(w, b.idmap);
}

BindMount get_bind(WireReader& r) {
  BindMount b;
  b.source = r.str();
  b.target = r.str();
  b.idmap = get_idmap(r);
  return b;
}

void put_binds(WireWriter& w, const std::vector<BindMount>& binds) {
  w.num(binds.size());
  for (const auto& b : binds) put_bind(w, b);
}

std::vector<BindMount> get_binds(WireReader& r) {
  std::vector<BindMount> out;
  const uint64_t n = r.num();
  for (uint64_t i = 0; r.ok() && i < n; ++i) out.push_back(get_bind(r));
  return out;
}

void put_toolchain(WireWriter& w, const std::vector<ToolchainPath>& toolchain) {
  w.num(toolchain.size());
  for (const auto& t : toolchain) {
    w.str(t.path);
    w.num(t.optional ? 1 : 0);
  }
}

std::vector<ToolchainPath> get_toolchain(WireReader& r) {
  std::vector<ToolchainPath> out;
  const uint64_t n = r.num();
  for (uint64_t i = 0; r.ok() && i < n; ++i) {
    ToolchainPath t;
    t.path = r.str();
    t.optional = r.num() != 0;
    out.push_back(std::move(t));
  }
  return out;
}

void put_network(WireWriter& w, const std::optional<JobNetworkPlan>& net) {
  w.num(net ? 1 : 0);
  if (!net) return;
  w.str(net->job_ifname);
  w.str(net->egress_ifname);
  w.num(net->job_address);
  w.num(net->gateway);
  w.num(static_cast<uint64_t>(net->prefix));
}

bool get_ifname(WireReader& r, char (&out)[IFNAMSIZ]) {
  const std::string name = r.str();
  if (name.empty() || name.size() >= IFNAMSIZ) return false;
  std::memcpy(out, name.c_str(), name.size() + 1);
  return true;
}

bool get_network(WireReader& r, std::optional<JobNetworkPlan>& net) {
  net.reset();
  if (r.num() == 0) return r.ok();
  JobNetworkPlan plan;
  if (!get_ifname(r, plan.job_ifname) || !get_ifname(r, plan.egress_ifname)) return false;
  plan.job_address = static_cast<Ipv4>(r.num());
  plan.gateway = static_cast<Ipv4>(r.num());
  plan.prefix = static_cast<int>(r.num());
  net = std::move(plan);
  return r.ok();
}

}  // namespace

void encode_sandbox_config(WireWriter& w, const SandboxConfig& box) {
  put_toolchain(w, box.toolchain);
  put_bind(w, box.workspace);
  put_binds(w, box.writable);
  put_binds(w, box.read_only);
  put_binds(w, box.overlaid);
  w.num(box.tmp_size_bytes);
  w.str(box.tmp_source);
  w.num(box.shm_size_bytes);
  w.str(box.hostname);
  w.num(box.uid);
  w.num(box.gid);
  w.str(box.user_name);
  w.str(box.group_name);
  w.str(box.init_path);
  put_network(w, box.network);
  w.num(box.deny_sockets ? 1 : 0);
  w.num(box.symlinks.size());
  for (const auto& [path, text] : box.symlinks) {
    w.str(path);
    w.str(text);
  }
  w.num(box.mask_special_git_files ? 1 : 0);
  w.num(box.own_user_namespace ? 1 : 0);
  w.num(box.workspace_later ? 1 : 0);
}

bool decode_sandbox_config(WireReader& r, SandboxConfig& box) {
  box.toolchain = get_toolchain(r);
  box.workspace = get_bind(r);
  box.writable = get_binds(r);
  box.read_only = get_binds(r);
  box.overlaid = get_binds(r);
  box.tmp_size_bytes = r.num();
  box.tmp_source = r.str();
  box.shm_size_bytes = r.num();
  box.hostname = r.str();
  box.uid = static_cast<uid_t>(r.num());
  box.gid = static_cast<gid_t>(r.num());
  box.user_name = r.str();
  box.group_name = r.str();
  box.init_path = r.str();
  if (!get_network(r, box.network)) return false;
  box.deny_sockets = r.num() != 0;
  box.symlinks.clear();
  const uint64_t links = r.num();
  for (uint64_t i = 0; r.ok() && i < links; ++i) {
    std::string path = r.str();
    box.symlinks.emplace_back(std::move(path), r.str());
  }
  box.mask_special_git_files = r.num() != 0;
  box.own_user_namespace = r.num() != 0;
  box.workspace_later = r.num() != 0;
  return r.ok();
}

void encode_spawn_spec(WireWriter& w, const SpawnSpec& spec) {
  w.str(spec.executable);
  w.strs(spec.argv);
  w.strs(spec.env);
  w.str(spec.cwd);
  w.num(spec.uid);
  w.num(spec.gid);
  w.num(spec.die_with_parent ? 1 : 0);
}

bool decode_spawn_spec(WireReader& r, SpawnSpec& spec) {
  spec.executable = r.str();
  spec.argv = r.strs();
  spec.env = r.strs();
  spec.cwd = r.str();
  spec.uid = static_cast<uid_t>(r.num());
  spec.gid = static_cast<gid_t>(r.num());
  spec.die_with_parent = r.num() != 0;
  return r.ok();
}

}  // namespace motor::sandbox
