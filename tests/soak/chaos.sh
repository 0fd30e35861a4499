#!/usr/bin/env bash
# The end-to-end chaos run (tests/soak/chaos.py does it all; see tests/soak/README.md): three
# agents, a broker and the aggregator in a network namespace of the run's own, where nftables
# rules can cut an agent's link without touching the machine's.
#
#   tests/soak/chaos.sh                      # the short form CI runs: one fault cycle (~2 min)
#   tests/soak/chaos.sh --minutes 20         # the long form: fault cycles for 20 minutes
#   EM_BUILD=build/x tests/soak/chaos.sh --workdir /tmp/chaos --keep
#
# Programs come from $EM_BUILD (default build/normal, relative to the repository root); every
# argument goes to chaos.py. Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) for the namespace,
# nftables, mosquitto, python3-paho-mqtt. Exit status: 0 pass, or skipped with a message where
# the kernel refuses a network namespace or nftables; 1 a check failed; 2 bad usage or setup.
set -euo pipefail

# shellcheck source=tests/soak/built.sh
source "$(dirname "${BASH_SOURCE[0]}")/built.sh"
agent="$build/firmware/agent/edgemon-agent"
aggregator="$build/host/aggregator/edgemon-aggregator"
em_need_built chaos.sh "$agent" "$aggregator"

if [[ "${EM_CHAOS_IN_NAMESPACE:-}" != 1 ]]; then
  if ! why="$(unshare --net true 2>&1)"; then
    echo "chaos.sh: SKIPPED: the kernel refuses a network namespace here (unshare --net: $why)"
    exit 0
  fi
  EM_CHAOS_IN_NAMESPACE=1 exec unshare --net "$0" "$@"
fi

# Inside the namespace: only its own loopback exists, and its rules are its own.
ip link set lo up
if ! why="$(nft add table inet chaos-probe 2>&1 && nft delete table inet chaos-probe 2>&1)"; then
  echo "chaos.sh: SKIPPED: nftables refused a table in the namespace ($why)"
  exit 0
fi
exec /usr/bin/python3 "$root/tests/soak/chaos.py" --agent "$agent" --aggregator "$aggregator" "$@"
