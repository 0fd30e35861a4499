#!/usr/bin/env bash
# scripts/bench.sh - builds the C benchmarks (Release, in build-bench/) and runs one:
#   scripts/bench.sh [proto|hist|procfs|ingest|level] [ARGS...]     (default: proto)
#   proto   one v1 data message: CBOR encode/decode and size against JSON (libcjson)
#   hist    histogram record, export and reset
#   procfs  each procfs read of a tick; smaps_rollup against resident size
#   ingest  span datagrams/s: the agent's ingest against a bare recvmmsg receiver, and what
#           bursts lose at the machine's net.unix.max_dgram_qlen
#   level   send() of a span over a hard deadline -> DEGRADED seen by a client (state page,
#           level push), through the real edgemon-agent (built too) on a closed broker port
# ARGS go to the benchmark (--help lists them). Results are written up in docs/BENCHMARKS.md
# with the command and the machine. Needs what scripts/test.sh installs plus libcjson-dev;
# installs nothing. The agent beside collectd is scripts/bench-agent.sh.
set -euo pipefail

cd "$(dirname "$0")/.."

which=${1:-proto}
case "$which" in
  proto | hist | procfs | ingest | level) [ $# -gt 0 ] && shift ;;
  -*) which=proto ;;
  *)
    echo "bench.sh: unknown benchmark '$which' (proto, hist, procfs, ingest, level)" >&2
    exit 2
    ;;
esac

if ! pkg-config --exists libcjson 2>/dev/null; then
  echo "bench.sh: libcjson not found by pkg-config; install the Debian package libcjson-dev" \
    "(apt-get install libcjson-dev)" >&2
  exit 1
fi

cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DEDGEMON_BENCH=ON -DEDGEMON_TESTS=OFF \
  >/dev/null
if [ "$which" = level ]; then
  cmake --build build-bench -j2 --target edgemon-agent bench_level_latency >/dev/null
  exec ./build-bench/tests/bench/bench_level_latency \
    --agent build-bench/firmware/agent/edgemon-agent "$@"
fi
cmake --build build-bench -j2 --target "bench_$which" >/dev/null
exec "./build-bench/tests/bench/bench_$which" "$@"
