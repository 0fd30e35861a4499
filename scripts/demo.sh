#!/usr/bin/env bash
# scripts/demo.sh - the README's main-job command. Installs what it needs (Debian 12, only
# what is missing), builds, then runs the live demo: a real mosquitto on a free loopback
# port, edgemon-aggregator (its /metrics URL is printed), the sample inference loop,
# edgemon-agent watching it, and `edgemon-cli tail` showing the telemetry as it arrives.
# EM_DEMO_SECONDS sets how long (default 20); Ctrl-C stops early. EM_DEMO_VIEW=top shows the
# full-screen `edgemon-cli top` instead of tail (on a terminal). Everything the demo starts is
# stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh

em_install_deps
em_install_web
mkdir -p build
em_log "building (build/normal)"
em_build build/normal -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ >/dev/null
exec /usr/bin/python3 scripts/lib/demo.py build/normal
