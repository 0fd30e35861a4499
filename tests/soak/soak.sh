#!/usr/bin/env bash
# Leak and memory soak of edgemon-agent under valgrind memcheck (tests/soak/soak.py does it all;
# see tests/soak/README.md). Needs valgrind, mosquitto and python3-paho-mqtt.
#
#   tests/soak/soak.sh                                     # the long form: 300 s, restarts every 30 s
#   tests/soak/soak.sh --seconds 45 --restart-every 15     # the short form CI runs
#   EM_BUILD=build/h-soak tests/soak/soak.sh --keep        # another build dir; keep the logs
#
# The agent is $EM_BUILD/firmware/agent/edgemon-agent (EM_BUILD defaults to build/normal,
# relative to the repository root). Every argument is passed to soak.py. Exit status: 0 pass,
# 1 a check failed (the reasons are printed), 2 bad usage or setup.
set -euo pipefail

# shellcheck source=tests/soak/built.sh
source "$(dirname "${BASH_SOURCE[0]}")/built.sh"
agent="$build/firmware/agent/edgemon-agent"
em_need_built soak.sh "$agent"
exec /usr/bin/python3 "$root/tests/soak/soak.py" --agent "$agent" "$@"
