#!/usr/bin/env bash
# scripts/bench-agent.sh - the agent benchmark: edgemon-agent beside collectd doing the same
# work (same target, same interval, same broker), CPU per minute, peak RSS, threads, MQTT
# traffic, and user-space instructions per tick under callgrind. The target is the product's
# own case by default: a 100 fps Python pipeline with 3 stages in edgemon.span(), whose spans
# the agent ingests (--target busy: a busy loop with no spans).
#
# Installs what it needs with apt-get, only when missing (scripts/lib/common.sh's package list
# plus collectd-core and valgrind; collectd-core brings collectd and its plugins without a
# default config or a started service). The benchmark counts MQTT traffic with its own stdlib
# subscriber, so mosquitto-clients is not needed. Builds a Release tree in
# build-bench/ (edgemon-agent only), then runs tests/bench/bench_agent.py with the arguments
# given here: --target pipeline|busy, --seconds N (window, default 60), --repeats N
# (default 3), --intervals LIST, --no-callgrind, --json FILE, --help. A full run takes about 20 minutes.
# Results are written up in docs/BENCHMARKS.md ("agent: cost beside collectd").
set -euo pipefail

cd "$(dirname "$0")/.."
source scripts/lib/common.sh

EM_PACKAGES+=(collectd-core valgrind)
em_install_deps
em_install_web

em_log "building edgemon-agent (Release) in build-bench/"
# scripts/bench.sh shares build-bench/ and may have configured it with another generator:
# name Ninja only for a fresh tree.
generator=(-G Ninja)
if [ -f build-bench/CMakeCache.txt ]; then
  generator=()
fi
mkdir -p build-bench
cmake -S . -B build-bench "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DEDGEMON_TESTS=OFF \
  >build-bench/configure.log 2>&1 || {
  cat build-bench/configure.log >&2
  exit 1
}
cmake --build build-bench --target edgemon-agent

em_log "running tests/bench/bench_agent.py $*"
exec /usr/bin/python3 tests/bench/bench_agent.py --agent build-bench/firmware/agent/edgemon-agent "$@"
