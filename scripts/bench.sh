#!/usr/bin/env bash
# scripts/bench.sh - builds the benchmarks (Release, in build-bench/) and runs the proto
# benchmark: one v1 data message, CBOR encode/decode against the same record as JSON
# (libcjson), sizes and ns per operation. Arguments go to bench_proto (--iterations N, --help).
# Results are written up in docs/BENCHMARKS.md. Needs cmake, a C compiler, libcbor-dev and
# libcjson-dev; installs nothing.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! pkg-config --exists libcjson 2>/dev/null; then
  echo "bench.sh: libcjson not found by pkg-config; install the Debian package libcjson-dev" \
    "(apt-get install libcjson-dev)" >&2
  exit 1
fi

cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DEDGEMON_BENCH=ON -DEDGEMON_TESTS=OFF
cmake --build build-bench -j2 --target bench_proto
./build-bench/tests/bench/bench_proto "$@"
