// Order statistics for the benchmarks: medians and nearest-rank percentiles.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace motor::bench {

// Nearest-rank percentile (p in 0..1); NaN for no samples.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p * static_cast<double>(v.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

inline double median(const std::vector<double>& v) { return percentile(v, 0.5); }

}  // namespace motor::bench
