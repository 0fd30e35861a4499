#!/usr/bin/env bash
# scripts/demo.sh - the README's main-job command. Installs what it needs (Debian 12, only
# what is missing), builds, and shows the telemetry contract at work: the C encoder writes
# every v1 message kind, the C decoder and Python's cbor2 read them back, and the sizes are
# compared with the same messages as JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh

em_install_deps
mkdir -p build
em_log "building (build/normal)"
em_build build/normal -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ >/dev/null

tool=build/normal/tests/tools/em-proto-tool
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$tool" vectors "$out"

em_log "one data message (3 stages, counters, memory, PSI) encoded by the C encoder"
od -An -tx1 -v "$out/data_basic.cbor" | head -6
echo "  ... $(stat -c %s "$out/data_basic.cbor") bytes"

em_log "decoded by the C decoder"
"$tool" decode <"$out/data_basic.cbor"

em_log "decoded independently by Python's cbor2 (integer keys as on the wire)"
/usr/bin/python3 -c 'import cbor2,sys,pprint; pprint.pprint(cbor2.loads(open(sys.argv[1],"rb").read()), width=100, compact=True)' "$out/data_basic.cbor"

em_log "every message kind: CBOR size vs the same message as JSON"
printf '%-22s %8s %8s %7s\n' message CBOR JSON ratio
for f in "$out"/*.cbor; do
  name=$(basename "$f" .cbor)
  c=$(stat -c %s "$f")
  j=$(($(stat -c %s "$out/$name.json") - 1))
  printf '%-22s %8d %8d %6.1fx\n' "$name" "$c" "$j" "$(echo "$j / $c" | awk -F/ '{print $1/$2}')"
done

em_log "a corrupted message is refused with the reason and the byte offset"
head -c 100 "$out/data_basic.cbor" | "$tool" decode || true
