#!/usr/bin/env bash
# scripts/bench-aggregator.sh - the aggregator's MQTT ingest against a bare subscriber draining
# the same broker in the same run, with edgemon-sim as the load (1000 devices by default, at
# 1, 5 and 10 Hz each, then doubling until the broker or the machine saturates).
#
# Builds a Release tree with the benchmarks in build/bench/ (or $EM_BENCH_BUILD): edgemon-sim,
# bench_drain and edgemon-aggregator; then runs tests/bench/bench_aggregator.py, which starts
# mosquitto on a free loopback port and prints a markdown table: offered msgs/s, delivered to
# the bare subscriber, ingested by the aggregator, their ratio, SQLite rows/s, aggregator CPU %
# and RSS, mosquitto and simulator CPU. Arguments go to bench_aggregator.py: --devices N,
# --rates LIST, --max-rate HZ, --seconds S (per step, default 10), --qos 0|1 (the simulator's
# data, default 0), --max-inflight N (the broker's, default 20), --no-aggregator (simulator
# and bare subscriber only: the simulator's and the broker's own ceiling),
# --compare-remote-write [--remote-write-interval D] [--repeats N] (each rate with remote write
# off and on, to Debian's Prometheus as the receiver), --help.
# Needs what scripts/test.sh installs plus libcjson-dev (the bench tree builds every
# benchmark); installs nothing. Results are written up in docs/BENCHMARKS.md.
set -euo pipefail

cd "$(dirname "$0")/.."

build=${EM_BENCH_BUILD:-build/bench}
targets=(edgemon-sim bench_drain)
for a in "$@"; do
  case "$a" in
    -h | --help) exec /usr/bin/python3 tests/bench/bench_aggregator.py --help ;;
  esac
done
if [[ " $* " != *" --no-aggregator "* ]]; then
  targets+=(edgemon-aggregator)
fi
if ! pkg-config --exists libcjson 2>/dev/null; then
  echo "bench-aggregator.sh: libcjson not found by pkg-config; install the Debian package" \
    "libcjson-dev (apt-get install libcjson-dev)" >&2
  exit 1
fi

generator=(-G Ninja)
if [ -f "$build/CMakeCache.txt" ]; then
  generator=()
fi
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DEDGEMON_BENCH=ON \
  -DEDGEMON_TESTS=OFF >/dev/null
cmake --build "$build" -j2 --target "${targets[@]}" >/dev/null
exec /usr/bin/python3 tests/bench/bench_aggregator.py --build "$build" "$@"
