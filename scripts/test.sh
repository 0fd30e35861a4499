#!/usr/bin/env bash
# scripts/test.sh - the README's test command: installs what the tests need (Debian 12,
# apt-get, only what is missing), checks that every C/C++ source is formatted as
# .clang-format says, then builds and runs the whole suite twice:
#   build/normal  gcc, warnings as errors: unit, integration and interop tests
#   build/asan    clang with AddressSanitizer + UndefinedBehaviorSanitizer: the same tests
#                 plus the libFuzzer harnesses for EM_FUZZ_SECONDS each (default 30)
# and a third, build/aarch64: the agent, the C client's tests and the unit tests cross-built
# for aarch64 (boards/toolchains/), the unit tests run under qemu-aarch64 (scripts/lib/cross.sh).
# Last the Debian packages of build/normal and build/aarch64 (amd64 and arm64): lintian, then
# the amd64 ones installed here, run, verified and purged (scripts/lib/packages.sh), then
# Debian 12 amd64 and Debian 11 arm64 systems booted under qemu run the README's board steps
# with them (scripts/lib/system.sh).
# Prints ctest's summary for each and exits non-zero when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh
source scripts/lib/cross.sh
source scripts/lib/packages.sh
source scripts/lib/system.sh

# The PyTorch example (firmware/client/python/examples/torch_inference.py) is run by the
# integration tests, so the example users copy is known to work. golang-go: `go tool pprof`, the
# real pprof reader test_cli_profile checks edgemon-cli profile --pprof's output with. tmux: the
# terminal test_cli_top drives edgemon-cli top in (send-keys, capture-pane).
EM_PACKAGES+=(python3-torch python3-torchvision clang-format nftables iproute2 chromium
  chromium-driver golang-go tmux)
em_install_deps
em_install_web
em_cross_install_deps

# Formatting first: every C and C++ source as .clang-format says, or the run fails here.
em_log "formatting: clang-format --dry-run -Werror"
mapfile -t sources < <(find common firmware host proto tests -name '*.[ch]' -o -name '*.cpp')
if ! clang-format --dry-run -Werror "${sources[@]}"; then
  echo "formatting: the files above differ from .clang-format; run clang-format -i on them" >&2
  exit 1
fi

fuzz_seconds=${EM_FUZZ_SECONDS:-30}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p build

status=0
run_suite() {
  local name=$1
  shift
  em_log "build/$name: configure and build"
  if ! em_build "build/$name" "$@"; then
    echo "build/$name: BUILD FAILED" >&2
    status=1
    return
  fi
  em_log "build/$name: ctest"
  if ! ctest --test-dir "build/$name" --output-on-failure -j 2; then
    status=1
  fi
}

run_suite normal -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DEDGEMON_WERROR=ON \
  -DCMAKE_INSTALL_PREFIX=/usr

# The agent under valgrind memcheck for 45 s with spans at a high rate and two broker
# restarts: no leak, no error, a flat RSS (tests/soak/README.md; the long form is 300 s).
em_log "soak: the agent under valgrind, short form"
if ! EM_BUILD=build/normal tests/soak/soak.sh --seconds 45 --restart-every 15; then
  echo "soak: FAILED" >&2
  status=1
fi
em_log "soak: the aggregator under 200 simulated devices x 10 Hz, short form (90 s)"
/usr/bin/python3 tests/soak/aggregator_soak.py --aggregator build/normal/host/aggregator/edgemon-aggregator --sim build/normal/host/sim/edgemon-sim --seconds 90 --devices 200 --warmup 40 || status=1
# Three agents, the broker and the aggregator through one cycle of every fault (kill -9 of
# each, a broker that stops acknowledging, a link that drops packets, a spool that cannot
# grow): every sequence number stored or counted as dropped (tests/soak/README.md, "Chaos run").
em_log "chaos: one cycle of every fault, then the accounting of every sequence number"
if ! EM_BUILD=build/normal tests/soak/chaos.sh; then
  echo "chaos: FAILED" >&2
  status=1
fi
run_suite asan -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DEDGEMON_WERROR=ON \
  -DEDGEMON_SANITIZE=ON -DEDGEMON_FUZZ=ON -DEM_FUZZ_SECONDS="$fuzz_seconds"

run_cross() {
  em_log "build/aarch64: cross build, unit tests under qemu-aarch64"
  if ! em_cross_test build/aarch64; then
    echo "build/aarch64: CROSS BUILD OR ITS TESTS FAILED" >&2
    status=1
  fi
}
run_cross

em_log "packages: amd64 and arm64 from build/normal and build/aarch64"
if em_packages_test build/normal build/aarch64; then
  # The service as deployed: Debian 12 amd64 and Debian 11 arm64 (JetPack 5's baseline) booted
  # under qemu (systemd as PID 1), the README's board steps inside each with the packages just
  # made (scripts/lib/system.sh).
  em_log "system: the README's board steps in a booted Debian 12 amd64 and Debian 11 arm64"
  em_system_test bookworm amd64 build/normal || status=1
  em_system_test bullseye arm64 build/aarch64 build/normal || status=1
else
  status=1
fi

if [ "$status" -ne 0 ]; then
  em_log "FAILED (see above)"
else
  em_log "all tests passed in all three builds and the packages"
fi
exit "$status"
