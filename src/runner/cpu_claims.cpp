#include "runner/cpu_claims.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace motor::runner {

std::string CpuClaim::list() const {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out.push_back(',');
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty() || part == "\n") continue;
    const auto dash = part.find('-');
    try {
      const int a = std::stoi(part.substr(0, dash));
      const int b = dash == std::string::npos ? a : std::stoi(part.substr(dash + 1));
      for (int c = a; c <= b && c - a < 65536; ++c) out.push_back(c);
    } catch (...) {
      return {};
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

CpuClaims::CpuClaims(std::vector<std::vector<int>> cores) : cores_(std::move(cores)), load_(cores_.size(), 0) {
  if (cores_.empty()) {
    cores_ = {{0}};
    load_ = {0};
  }
}

CpuClaims CpuClaims::from_sysfs() {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::string s;
    std::getline(in, s);
    return s;
  };
  std::map<std::vector<int>, int> seen;
  std::vector<std::vector<int>> cores;
  for (int cpu : parse_cpu_list(read("/sys/devices/system/cpu/online"))) {
    auto siblings = parse_cpu_list(read(fmt::format("/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list", cpu)));
    if (siblings.empty()) siblings = {cpu};
    if (seen.emplace(siblings, 0).second) cores.push_back(siblings);
  }
  return CpuClaims(std::move(cores));
}

size_t CpuClaims::cpu_count() const {
  size_t n = 0;
  for (const auto& c : cores_) n += c.size();
  return n;
}

CpuClaim CpuClaims::claim(int64_t cpus) {
  std::vector<size_t> order(cores_.size());
  std::iota(order.begin(), order.end(), 0);
  // Least-loaded cores first; among equals, the lowest numbered (stable).
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return load_[a] < load_[b]; });
  CpuClaim claim;
  int64_t have = 0;
  for (size_t i : order) {
    if (have >= cpus && have > 0) break;
    if (load_[i] > 0) claim.overlapping = true;
    ++load_[i];
    claim.cpus.insert(claim.cpus.end(), cores_[i].begin(), cores_[i].end());
    have += static_cast<int64_t>(cores_[i].size());
  }
  std::sort(claim.cpus.begin(), claim.cpus.end());
  return claim;
}

bool CpuClaims::can_claim(int64_t cpus, int64_t per_core) const {
  std::vector<int> loads = load_;
  std::vector<size_t> order(cores_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return loads[a] < loads[b]; });
  int64_t have = 0;
  for (size_t i : order) {
    if (have >= cpus && have > 0) return true;
    if (loads[i] >= per_core) return false;
    have += static_cast<int64_t>(cores_[i].size());
  }
  return have >= cpus;
}

void CpuClaims::release(const CpuClaim& claim) {
  std::set<int> cpus(claim.cpus.begin(), claim.cpus.end());
  for (size_t i = 0; i < cores_.size(); ++i) {
    if (cpus.count(cores_[i].front()) && load_[i] > 0) --load_[i];
  }
}

size_t CpuClaims::claimed_cores() const {
  return static_cast<size_t>(std::count_if(load_.begin(), load_.end(), [](int l) { return l > 0; }));
}

}  // namespace motor::runner
