#!/bin/sh
# tests/system/inside.sh - runs as root inside the booted test system (scripts/lib/system.sh),
# systemd as PID 1, no network: does what README.md's "Installing on a board" tells a user to
# do, word for word where a command is given, and records what happened. It asserts nothing
# itself: it writes facts (key=value lines in results.txt) and the evidence (journals, a
# recording of every MQTT message the device published) into the share, and
# tests/system/test_booted.py judges them on the host side. Every step is bounded in time.
#
# The share (virtio-9p, mounted at $1) holds debs/ (this tree's packages) and receives out/.
set -u
share=${1:-/mnt/share}
out=$share/out
mkdir -p "$out"
results=$out/results.txt
: >"$results"
device=vm-$(. /etc/os-release && echo "$ID$VERSION_ID")
config=/etc/edgemon/edgemon-agent.ini
loop=/usr/share/doc/python3-edgemon/examples/sample_inference.py

fact() { printf '%s=%s\n' "$1" "$2" >>"$results"; }
now_ms() { date +%s%3N; }
# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds or time is up.
wait_for() {
  end=$(($(date +%s) + $1))
  shift
  while ! "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.2
  done
}
unit_prop() { systemctl show -p "$2" --value "$1"; }

fact kernel "$(uname -r)"
fact machine "$(uname -m)"
fact paranoid_before "$(cat /proc/sys/kernel/perf_event_paranoid)"

# 1. The README: install the board's packages (and the host's, for the aggregator below).
cd "$share/debs" || exit 1
apt-get install -y ./edgemon-agent_*.deb ./python3-edgemon_*_all.deb \
  ./edgemon-host_*.deb >"$out/apt-install.log" 2>&1
fact install_rc $?
cd /
fact paranoid_after "$(cat /proc/sys/kernel/perf_event_paranoid)"
fact loop_shipped "$([ -f "$loop" ] && echo yes || echo no)"

# The budget, scaled to this machine's speed (an emulated CPU runs the loop 10 to 50 times
# slower than a board): m is the median time of the loop's own infer(). p99 and miss_over at
# 2.5m and the deadline at 4m, so the slow phase (5x) breaks them and the light model (1/4 of
# the work) keeps them; frames at a third of what the CPU allows, at most 20 fps, and min_rate
# at half of that; stall at 10 frame periods.
set -- $(python3 - "$loop" <<'EOF'
import importlib.util, math, statistics, sys, time
spec = importlib.util.spec_from_file_location("loop", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
w = [math.sin(i) for i in range(20000)]
t = []
for n in range(15):
    t0 = time.perf_counter(); mod.infer(w, n); t.append(time.perf_counter() - t0)
m = statistics.median(t) * 1000
fps = max(2, min(20, int(1000 / (3 * m))))
print(max(1, round(2.5 * m)), max(2, round(4 * m)), fps, max(1, fps // 2), 10 * 1000 // fps)
EOF
)
budget_ms=$1 deadline_ms=$2 fps=$3 min_rate=$4 stall_ms=$5
fact budget_ms "$budget_ms"
fact fps "$fps"

# 2. sudoedit the config: device_id, [target], [mqtt] broker (the default 127.0.0.1 stays), the
# budget's figures. Nothing else.
sed -i -e "s/^device_id = .*/device_id = $device/" \
  -e 's/^cmdline = .*/cmdline = sample_inference.py --fps/' \
  -e "s/^p99 = 40ms .*/p99 = ${budget_ms}ms/" \
  -e "s/^deadline = 100ms .*/deadline = ${deadline_ms}ms/" \
  -e "s/^miss_over = 40ms .*/miss_over = ${budget_ms}ms/" \
  -e "s/^stall = 500ms .*/stall = ${stall_ms}ms/" \
  -e "s/^min_rate = 15 .*/min_rate = $min_rate/" "$config"
fact device "$device"
edgemon-agent --config "$config" --check >"$out/check.log" 2>&1
fact check_rc $?
edgemon-agent --config "$config" --detect >"$out/detect.txt" 2>&1

# Everything the device publishes, from before the start, to be decoded on the host side.
edgemon-cli record --out "$out/run.rec" --device "$device" --duration 150 \
  >"$out/record.log" 2>&1 &
record_pid=$!
sleep 1

t0=$(now_ms)
systemctl restart edgemon-agent
fact restart_rc $?
fact start_ms $(($(now_ms) - t0))
fact active "$(systemctl is-active edgemon-agent)"
agent=$(unit_prop edgemon-agent MainPID)
fact agent_user "$(ps -o user= -p "$agent")"
fact agent_capeff "$(awk '/^CapEff/ {print $2}' /proc/"$agent"/status)"
fact runtime_dir_listing "$(ls /run/edgemon | tr '\n' ' ')"

# 3. The inference process's user joins the edgemon group, and runs the sample loop through su
# (and sudo -u where installed), as a user would: the loop with a slow phase.
useradd -m app 2>/dev/null
usermod -aG edgemon app
su app -c "python3 $loop --fps $fps --seconds 45 --slow-from 12 --slow-for 8" \
  >"$out/loop.log" 2>&1 &
wait_for 10 pgrep -u app -f "^python3 $loop"
python=$(pgrep -u app -f "^python3 $loop" | head -1)
fact loop_pid "$python"
ancestors="" up=$python
while up=$(awk '{print $4}' /proc/"$up"/stat 2>/dev/null) && [ "$up" -gt 1 ]; do
  ancestors="$ancestors $(cat /proc/"$up"/comm)"
done
fact loop_ancestors "${ancestors# }"
wait_for 20 sh -c "journalctl -u edgemon-agent -o cat | grep -q 'target: attached to pid'"
fact attached_pid "$(journalctl -u edgemon-agent -o cat |
  sed -n 's/.*target: attached to pid \([0-9]*\).*/\1/p' | tail -1)"
fact sudo_installed "$(command -v sudo >/dev/null && echo yes || echo no)"

# The breach: the slow phase from 12 s to 20 s; wait for the loop to end (45 s).
wait_for 90 sh -c "! pgrep -u app -f '^python3 $loop'"
fact loop_switched "$(grep -c 'switching to the light model' "$out/loop.log")"
fact loop_back "$(grep -c 'back to the full model' "$out/loop.log")"

# The same loop again through sudo -u: the agent re-attaches to the new python3, not to sudo.
if command -v sudo >/dev/null; then
  sudo -u app python3 "$loop" --fps "$fps" --seconds 12 >"$out/loop-sudo.log" 2>&1 &
  wait_for 10 pgrep -u app -f "^python3 $loop"
  python=$(pgrep -u app -f "^python3 $loop" | head -1)
  fact sudo_loop_pid "$python"
  wait_for 15 sh -c "journalctl -u edgemon-agent -o cat | grep -q 'attached to pid $python '"
  fact sudo_attached_pid "$(journalctl -u edgemon-agent -o cat |
    sed -n 's/.*target: attached to pid \([0-9]*\).*/\1/p' | tail -1)"
  wait_for 30 sh -c "! pgrep -u app -f '^python3 $loop'"
fi

# 4. systemctl reload applies a changed budget.
sed -i "s/^p99 = ${budget_ms}ms/p99 = $((budget_ms * 2))ms/" "$config"
systemctl reload edgemon-agent
fact reload_rc $?
wait_for 10 sh -c "journalctl -u edgemon-agent -o cat | grep -q 'reload: '"
fact reload_log "$(journalctl -u edgemon-agent -o cat | grep 'reload: ' | tail -1)"

# 5. The watchdog: a stopped agent is killed and restarted.
restarts=$(unit_prop edgemon-agent NRestarts)
kill -STOP "$agent"
t0=$(now_ms)
wait_for 40 sh -c "[ \"\$(systemctl show -p MainPID --value edgemon-agent)\" != $agent ] &&
  [ \"\$(systemctl is-active edgemon-agent)\" = active ]"
fact watchdog_restart_ms $(($(now_ms) - t0))
fact watchdog_restarts $(($(unit_prop edgemon-agent NRestarts) - restarts))
sleep 3

# 6. The aggregator's unit from edgemon-host: started, stores what the agent publishes.
systemctl enable --now edgemon-aggregator >"$out/aggregator-enable.log" 2>&1
fact aggregator_rc $?
wait_for 20 curl -fsS http://127.0.0.1:9108/healthz
curl -sS -o "$out/healthz.json" -w '%{http_code}' http://127.0.0.1:9108/healthz >"$out/healthz.code"
curl -sS -o "$out/metrics.txt" http://127.0.0.1:9108/metrics
fact aggregator_user "$(stat -c %U /proc/"$(unit_prop edgemon-aggregator MainPID)")"
sleep 3
curl -sS -o "$out/devices.json" http://127.0.0.1:9108/api/devices

# 7. systemctl stop ends within TimeoutStopSec.
t0=$(now_ms)
systemctl stop edgemon-agent
fact stop_ms $(($(now_ms) - t0))
fact timeout_stop_s "$(systemd-analyze timespan "$(unit_prop edgemon-agent TimeoutStopUSec)" |
  sed -n 's/.*μs: *\([0-9]*\).*/\1/p' | awk '{print int($1 / 1000000)}')"
kill "$record_pid" 2>/dev/null
wait "$record_pid" 2>/dev/null
journalctl -u edgemon-agent -o short-monotonic >"$out/agent.journal" 2>&1
journalctl -u edgemon-aggregator -o short-monotonic >"$out/aggregator.journal" 2>&1

# 8. apt purge leaves nothing.
systemctl stop edgemon-aggregator
apt-get purge -y edgemon-agent edgemon-host python3-edgemon >"$out/apt-purge.log" 2>&1
fact purge_rc $?
left=""
for p in /etc/edgemon /usr/bin/edgemon-agent /usr/lib/python3/dist-packages/edgemon \
  /var/lib/edgemon /var/lib/edgemon-aggregator /run/edgemon /usr/share/doc/python3-edgemon \
  /etc/systemd/system/multi-user.target.wants/edgemon-agent.service; do
  [ -e "$p" ] && left="$left $p"
done
fact purge_left "${left# }"
fact done 1
