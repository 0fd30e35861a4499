"""edgemon-cli profile against the profiles edgemon-sim --profiles publishes through a real
mosquitto: the hottest-stacks and by-function tables, --folded, the flame graph (parsed as XML:
one rectangle per distinct prefix, widths in proportion), --pprof read by the real pprof reader
(`go tool pprof -raw`) with the same totals, --stage keeping one stage's samples, --take
publishing cmd/profile, and the exit codes (1 no such stage, 2 bad arguments, 3 aggregator
down, 4 bad file).

The expected numbers are computed here from the profile's JSON form (stacks of frame indices,
root first, with samples, off-CPU ns and stage) with Python's own arithmetic; the CBOR comes
byte for byte from the broker, so a file is what the aggregator's ?format=cbor would serve."""

import json
import os
import re
import shutil
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections import defaultdict

import cbor2
import pytest

import forensics
from conftest import Broker, broker_and_aggregator, free_port, mqtt_client, wait_for

SIM = os.environ.get("EM_SIM")
CLI = os.environ.get("EM_CLI")
SVG = "{http://www.w3.org/2000/svg}"
GO = shutil.which("go")


class Capture:
    """Every payload published on the given topic filter, in arrival order."""

    def __init__(self, port, topic):
        self.got = []
        self.lock = threading.Lock()
        self.client = mqtt_client(port, client_id="profile-capture-" + str(free_port()))
        self.client.on_message = self._on
        self.client.subscribe(topic, qos=1)

    def _on(self, client, userdata, msg):
        with self.lock:
            self.got.append((msg.topic, bytes(msg.payload)))

    def stop(self):
        self.client.loop_stop()
        self.client.disconnect()


def cli(*args, timeout=20):
    return subprocess.run([CLI, "profile", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """(broker, tmp, [(device, cbor path, json dict)]) after a simulator run."""
    assert SIM and CLI, "EM_SIM and EM_CLI must name the binaries (run through ctest)"
    tmp = tmp_path_factory.mktemp("profile")
    broker = Broker(tmp).start()
    cap = forensics.Capture(broker.port, "profile")
    time.sleep(0.2)
    try:
        n = forensics.simulate(broker.port, 2, "pr", 9, "--profiles")["profile"]
        assert n >= 1
        wait_for(lambda: len(cap.got["profile"]) == n, 10, "every profile at the subscriber")
    finally:
        cap.stop()
    out = []
    for i, (device, payload) in enumerate(cap.got["profile"]):
        assert cbor2.loads(payload)  # A CBOR map, as published.
        path = tmp / f"p{i}.cbor"
        path.write_bytes(payload)
        r = cli("--file", path, "--json")
        assert r.returncode == 0, r.stderr
        out.append((device, path, json.loads(r.stdout)))
    yield broker, tmp, out
    broker.stop()


def names(p, stack):
    return [p["frames"][i]["name"].replace(";", ":") for i in stack["frames"]]


def test_show_prints_the_hottest_stacks_and_functions(published):
    _, _, profiles = published
    _, path, p = profiles[0]
    total = max(p["samples"], sum(s["samples"] for s in p["stacks"]))
    r = cli("--file", path, "--top", 3)
    assert r.returncode == 0, r.stderr
    assert f"samples, {p['lost']} lost" in r.stdout and "escalation" in r.stdout
    rows = r.stdout.split("hottest stacks")[1].split("by function")[0].splitlines()[2:5]
    hot = sorted(p["stacks"], key=lambda s: (-s["samples"], -s["off_cpu_ns"]))[:3]
    for row, s in zip(rows, hot):
        cells = row.split()
        assert int(cells[0]) == s["samples"]
        assert cells[1] == f"{100 * s['samples'] / total:.1f}"
        assert cells[3] == (s["stage"] or "-")
        assert ";".join(names(p, s)).endswith(cells[4].removeprefix("..."))
    self_, tot = defaultdict(int), defaultdict(int)
    for s in p["stacks"]:
        self_[s["frames"][-1]] += s["samples"]
        for f in set(s["frames"]):
            tot[f] += s["samples"]
    best = sorted(tot, key=lambda f: (-self_[f], -tot[f], f))[:3]
    frows = r.stdout.split("by function")[1].splitlines()[2:5]
    for row, f in zip(frows, best):
        cells = row.split()
        assert (int(cells[0]), int(cells[2])) == (self_[f], tot[f])
        assert cells[5] == p["frames"][f]["name"]


def test_folded_lines_sum_the_stacks(published):
    _, _, profiles = published
    _, path, p = profiles[0]
    want = defaultdict(int)
    for s in p["stacks"]:
        if s["samples"]:
            want[";".join(names(p, s))] += s["samples"]
    r = cli("--file", path, "--folded")
    assert r.returncode == 0, r.stderr
    got = {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in r.stdout.splitlines()}
    assert got == dict(want)


def test_stage_keeps_the_samples_of_that_stage(published):
    _, _, profiles = published
    _, path, p = profiles[0]
    staged = [s for s in p["stacks"] if s["stage"] and s["samples"]]
    assert staged, "the simulator's profile has stages"
    stage = staged[0]["stage"]
    want = defaultdict(int)
    for s in staged:
        if s["stage"] == stage:
            want[";".join(names(p, s))] += s["samples"]
    r = cli("--file", path, "--folded", "--stage", stage)
    assert r.returncode == 0, r.stderr
    got = {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in r.stdout.splitlines()}
    assert got == dict(want)
    shown = cli("--file", path, "--stage", stage, "--top", 50)
    assert f", stage {stage}:" in shown.stdout.splitlines()[0]
    rows = shown.stdout.split("hottest stacks")[1].split("by function")[0].splitlines()[2:]
    assert rows and all(row.split()[3] == stage for row in rows if row.strip())
    bad = cli("--file", path, "--stage", "no-such-stage")
    assert bad.returncode == 1 and "no stage 'no-such-stage'" in bad.stderr
    assert all(name in bad.stderr for name in p["stages"])
    assert cli("--file", path, "--stage", stage, "--json").returncode == 2


def test_svg_has_a_rect_per_prefix_in_proportion(published, tmp_path):
    _, _, profiles = published
    _, path, p = profiles[0]
    prefixes = defaultdict(int)
    for s in p["stacks"]:
        for k in range(1, len(s["frames"]) + 1):
            if s["samples"]:
                prefixes[tuple(s["frames"][:k])] += s["samples"]
    drawn = sum(s["samples"] for s in p["stacks"])
    out = tmp_path / "p.svg"
    r = cli("--file", path, "--svg", out)
    assert r.returncode == 0, r.stderr
    root = ET.parse(out).getroot()
    rects = [e for e in root.iter(SVG + "rect") if e.get("class", "").startswith("f ")]
    assert len(rects) == len(prefixes)
    widths = sorted(float(e.get("width")) for e in rects)
    want = sorted(n / drawn * 1180 for n in prefixes.values())
    assert all(abs(w - x) < 0.01 for w, x in zip(widths, want)), (widths, want)
    kinds = {e.get("class").split()[1] for e in rects}
    assert kinds <= {"python", "native", "kernel", "unknown"} and "python" in kinds
    assert all(e.find(SVG + "title") is not None for e in rects)
    assert not any("href" in k for e in root.iter() for k in e.attrib)


@pytest.mark.skipif(GO is None, reason="go tool pprof (golang-go) is installed by scripts/test.sh")
def test_pprof_is_read_by_go_tool_pprof_with_the_same_totals(published, tmp_path):
    _, _, profiles = published
    _, path, p = profiles[0]
    out = tmp_path / "p.pb"
    r = cli("--file", path, "--pprof", out, "--folded")
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, HOME=str(tmp_path), GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    raw = subprocess.run([GO, "tool", "pprof", "-raw", str(out)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert raw.returncode == 0, raw.stderr
    text = raw.stdout
    assert "samples/count cpu/nanoseconds" in text and "off_cpu/nanoseconds" in text
    values = [list(map(int, m.group(1).split()))
              for m in re.finditer(r"^\s+(\d+\s+\d+\s+\d+): [\d ]+$", text, re.M)]
    assert len(values) == len(p["stacks"])
    period = round(1e9 / p["hz"])
    assert sum(v[0] for v in values) == sum(s["samples"] for s in p["stacks"])
    assert sum(v[1] for v in values) == sum(s["samples"] for s in p["stacks"]) * period
    assert sum(v[2] for v in values) == sum(s["off_cpu_ns"] for s in p["stacks"])
    for note in p["notes"]:
        assert f"Comment: {note}" in text


def test_take_publishes_cmd_profile(published):
    broker, _, _ = published
    cap = Capture(broker.port, "edgemon/v1/pr-0002/cmd/#")
    try:
        time.sleep(0.2)
        r = cli("--take", "--device", "pr-0002", "--seconds", "7",
                "--broker", f"mqtt://127.0.0.1:{broker.port}")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: cap.got, 5, "cmd/profile at the subscriber")
    finally:
        cap.stop()
    topic, payload = cap.got[0]
    assert topic == "edgemon/v1/pr-0002/cmd/profile"
    m = cbor2.loads(payload)
    assert 3 in m.values() and 7 in m.values()
    dec = subprocess.run([CLI, "decode", "-"], input=payload, capture_output=True, timeout=10)
    assert dec.returncode == 0, dec.stderr


def test_exit_codes(published, tmp_path):
    _, _, profiles = published
    _, path, _ = profiles[0]
    assert cli("--file", path, "--json", "--folded").returncode == 2
    assert cli("--device", "bad/id").returncode == 2
    assert cli("--take", "--device", "d", "--seconds", "61").returncode == 2
    assert cli("--seconds", "5", "--device", "d").returncode == 2
    assert cli("--device", "d", "--aggregator", f"http://127.0.0.1:{free_port()}").returncode == 3
    assert cli("--file", tmp_path / "missing.cbor").returncode == 4
    junk = tmp_path / "junk.cbor"
    junk.write_bytes(cbor2.dumps({0: 1, 1: 5}))
    bad = cli("--file", junk)
    assert bad.returncode == 4 and "not a profile" in bad.stderr
    assert cli("--file", path, "--svg", tmp_path / "no" / "dir.svg").returncode == 4
    assert cli("--file", path, "--pprof", tmp_path / "no" / "dir.pb").returncode == 4


def shares(m):
    """({function: self %}, {function: total %}, {folded stack: %}) of a profile's CBOR map,
    each of max(key 10, the stacks' samples), functions matched by name."""
    names_ = [m[13][i + 1] for i in range(0, len(m[13]), 3)]
    stacks = [s for s in m[14] if s[0]]
    total = max(m[10], sum(s[0] for s in m[14]))
    self_, tot, folded = defaultdict(int), defaultdict(int), defaultdict(int)
    for s in stacks:
        frames = [names_[i] for i in s[3:]]
        self_[frames[-1]] += s[0]
        for name in set(frames):
            tot[name] += s[0]
        folded[";".join(f.replace(";", ":") for f in frames)] += s[0]
    pct = lambda d: {k: 100 * v / total for k, v in d.items()}
    return pct(self_), pct(tot), pct(folded)


@pytest.fixture
def grown(published, tmp_path):
    """(baseline path, breach path, baseline map, breach map): the breach is the simulator's
    profile with its least-sampled stack (whose leaf is not the hottest's) given 40 times its
    samples and the window's count raised to match, so that leaf's share grew."""
    _, _, profiles = published
    _, path, _ = profiles[0]
    base = cbor2.loads(path.read_bytes())
    hot_leaf = base[14][0][-1]
    pick = max(i for i, s in enumerate(base[14]) if s[-1] != hot_leaf and s[0])
    breach = cbor2.loads(path.read_bytes())
    extra = breach[14][pick][0] * 39
    breach[14][pick][0] += extra
    breach[10] += extra
    breach[14].sort(key=lambda s: -s[0])  # Descending samples (rule P2).
    breach[4] += 1  # Its own number and a later window, so the aggregator keeps both.
    breach[2] += 60 * 10**9
    out = tmp_path / "breach.cbor"
    out.write_bytes(cbor2.dumps(breach))
    return path, out, base, breach


def test_diff_puts_the_grown_function_first_with_its_shares(grown):
    base_path, path, base, breach = grown
    bself, btot, _ = shares(base)
    nself, ntot, _ = shares(breach)
    delta = {f: nself.get(f, 0) - bself.get(f, 0) for f in set(bself) | set(nself)}
    first = max(delta, key=lambda f: delta[f])
    r = cli("--file", path, "--diff", base_path, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    f = d["functions"][0]
    assert f["name"] == first and f["self_delta"] > 0
    assert f["self_pct"]["baseline"] == pytest.approx(bself.get(first, 0), abs=1e-4)
    assert f["self_pct"]["profile"] == pytest.approx(nself[first], abs=1e-4)
    assert f["self_delta"] == pytest.approx(delta[first], abs=2e-4)
    assert f["total_pct"]["profile"] == pytest.approx(ntot[first], abs=1e-4)
    assert [g["self_delta"] for g in d["functions"]] == sorted(
        (g["self_delta"] for g in d["functions"]), reverse=True)
    assert d["samples"] == {"baseline": max(base[10], sum(s[0] for s in base[14])),
                            "profile": max(breach[10], sum(s[0] for s in breach[14]))}
    assert d["off_cpu_ns"]["profile"] == sum(s[1] for s in breach[14])
    table = cli("--file", path, "--diff", base_path, "--top", 3)
    assert table.returncode == 0, table.stderr
    row = table.stdout.split("by function")[1].splitlines()[2].split()
    assert row[-1] == first and row[2] == f"{delta[first]:+.2f}"
    assert row[1] == f"{nself[first]:.2f}"


def test_diff_folded_gives_each_stack_its_two_shares(grown):
    base_path, path, base, breach = grown
    _, _, bf = shares(base)
    _, _, nf = shares(breach)
    r = cli("--file", path, "--diff", base_path, "--folded")
    assert r.returncode == 0, r.stderr
    got = {}
    for line in r.stdout.splitlines():
        stack, was, now, delta = line.rsplit(" ", 3)
        got[stack] = (float(was), float(now), float(delta))
    assert set(got) == set(bf) | set(nf)
    for stack, (was, now, delta) in got.items():
        assert was == pytest.approx(bf.get(stack, 0), abs=0.006)
        assert now == pytest.approx(nf.get(stack, 0), abs=0.006)
    first = r.stdout.splitlines()[0].rsplit(" ", 3)[0]
    assert first == max(got, key=lambda s: nf.get(s, 0) - bf.get(s, 0))
    assert got[first][2] > 0


def test_diff_svg_paints_the_grown_function_red(grown, tmp_path):
    base_path, path, base, breach = grown
    bself, _, _ = shares(base)
    nself, _, _ = shares(breach)
    first = max(nself, key=lambda f: nself[f] - bself.get(f, 0))
    out = tmp_path / "diff.svg"
    r = cli("--file", path, "--diff", base_path, "--svg", out, "--folded")
    assert r.returncode == 0, r.stderr
    root = ET.parse(out).getroot()  # Valid XML.
    rects = [e for e in root.iter(SVG + "rect") if e.get("class", "").startswith("f ")]
    mine = [e for e in rects if e.find(SVG + "title").text.startswith(first + " ")]
    assert mine and any(e.get("class").split()[2] == "grew" for e in mine)
    for e in mine:
        if e.get("class").split()[2] == "grew":
            red, green, blue = map(int, re.match(r"rgb\((\d+),(\d+),(\d+)\)", e.get("fill")).groups())
            assert red == 255 and green < 255 and green == blue
            assert "baseline's" in e.find(SVG + "title").text
    assert {e.get("class").split()[2] for e in rects} <= {"grew", "shrank", "same"}
    assert "shrank" in {e.get("class").split()[2] for e in rects}


def test_diff_bad_baseline_is_an_input_error(published, tmp_path):
    _, _, profiles = published
    _, path, _ = profiles[0]
    missing = cli("--file", path, "--diff", tmp_path / "missing.cbor")
    assert missing.returncode == 4 and "missing.cbor" in missing.stderr
    junk = tmp_path / "junk.cbor"
    junk.write_bytes(cbor2.dumps({0: 1, 1: 5}))
    bad = cli("--file", path, "--diff", junk)
    assert bad.returncode == 4 and "not a profile" in bad.stderr and "--diff" in bad.stderr
    assert cli("--file", path, "--diff", path, "--stage", "x").returncode == 2
    assert cli("--file", path, "--diff", path, "--pprof", tmp_path / "p.pb").returncode == 2
    assert cli("--list", "--device", "d", "--diff", path).returncode == 2


def test_diff_at_takes_the_baseline_from_the_aggregator(grown, tmp_path):
    base_path, path, base, breach = grown
    device = "pr-diff"
    with broker_and_aggregator(tmp_path) as (broker, agg):
        forensics.publish(broker.port, device, base_path.read_bytes(), path.read_bytes(),
                          kind="profile")
        wait_for(lambda: agg.get(f"/api/devices/{device}/profiles")[0] == 200 and len(
            forensics.api_list(agg, device, kind="profiles")) == 2, 10, "both profiles stored")
        url = f"http://127.0.0.1:{agg.port}"
        at = str(base[2] // 10**9)  # Nearer the baseline's window than the breach's.
        r = cli("--aggregator", url, "--device", device, "--diff-at", at, "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        want = json.loads(cli("--file", path, "--diff", base_path, "--json").stdout)
        assert got["baseline"] == f"{device} {base[3]}-{base[4]}"
        assert got["profile"] == f"{device} {breach[3]}-{breach[4]}"
        assert {k: got[k] for k in ("samples", "functions", "stacks")} == {
            k: want[k] for k in ("samples", "functions", "stacks")}
        none = cli("--aggregator", url, "--device", "pr-none", "--diff-at", at)
        assert none.returncode == 1
    assert cli("--file", path, "--diff-at", at).returncode == 2
    assert cli("--file", path, "--diff", base_path, "--diff-at", at).returncode == 2
    assert cli("--device", device, "--diff-at", "yesterday").returncode == 2
