#!/usr/bin/env bash
# The capacity report (issue 6, docs/capacity.md) in one command:
#
#   bench/capacity.sh [seconds-per-level (8)] [more motor_bench_capacity options...]
#
# Installs the bench-only packages (bench/setup: gnuplot, podman, runc; idempotent), builds
# motor_bench_capacity (and the runner it drives) in $BUILD_DIR (default build/bench,
# RelWithDebInfo), runs it, and leaves in $OUT (default $BUILD_DIR/capacity):
#   report.txt      what it printed
#   capacity.json   every figure
#   capacity.svg    start latency and throughput against concurrency (gnuplot)
#   capacity.dat, capacity.gp   the plot's data and script
# Run as root on a host as quiet as you can make it; one run takes about 3-5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
  echo "bench/capacity.sh: run as root (the runner makes cgroups; bench/setup installs packages)" >&2
  exit 1
fi
BUILD_DIR=${BUILD_DIR:-build/bench}
seconds=${1:-8}
shift || true
OUT=${OUT:-$BUILD_DIR/capacity}

bench/setup
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOTOR_WERROR=ON >/dev/null
fi
cmake --build "$BUILD_DIR" -j"$(nproc)" --target motor_bench_capacity >/dev/null
mkdir -p "$OUT"
"$BUILD_DIR/bench/motor_bench_capacity" "$seconds" --out "$OUT" "$@" | tee "$OUT/report.txt"
