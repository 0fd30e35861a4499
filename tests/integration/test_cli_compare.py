"""`edgemon-cli compare`: synthetic recordings with known latency distributions in, verdicts,
changes and exit codes out.

The recordings are built here from the documented formats only: data messages as CBOR with
the integer keys of proto/edgemon.cddl (stage windows with buckets at scale 6, as the agent
sends them), framed as host/lib/recording.h describes (CRC-32C Castagnoli). No broker needed.
"""

import json
import math
import os
import random
import subprocess

import cbor2
import pytest

from recordings import HEADER, encode_record

CLI = os.environ.get("EM_CLI")

pytestmark = pytest.mark.skipif(not CLI, reason="EM_CLI not set")

STAGES = {"preprocess": 130_000, "infer": 8_000_000, "postprocess": 32_000}  # median, ns
SIGMA = 0.1  # log-normal spread


# ---- recording framing ----------------------------------------------------------------------

def frame(topic, payload, t_ns, retained=False):
    return encode_record(topic, payload, t_ns, retained)


# ---- data messages --------------------------------------------------------------------------

def bucket_index(d):
    """Scale-6 bucket of d > 0 ns, exactly: ceil(64 * log2(d)) - 1 with integers."""
    i = (d ** 64).bit_length() - 1
    return i - 1 if d & (d - 1) == 0 else i


def nearest_rank(sorted_values, q):
    n = len(sorted_values)
    return sorted_values[max(1, min(n, math.ceil(q * n))) - 1]


def stage_window(name, values):
    if not values:
        return {0: name, 1: 0}
    v = sorted(values)
    counts = {}
    for d in v:
        if d > 0:
            i = bucket_index(d)
            counts[i] = counts.get(i, 0) + 1
    flat, prev = [], None
    for i in sorted(counts):
        flat += [i if prev is None else i - prev, counts[i]]
        prev = i
    return {0: name, 1: len(v), 2: sum(v), 3: v[0], 4: v[-1],
            5: nearest_rank(v, 0.5), 6: nearest_rank(v, 0.9), 7: nearest_rank(v, 0.99),
            8: nearest_rank(v, 0.999), 9: 6, 10: v.count(0), 11: flat}


def data_message(seq, t_ns, windows):
    return cbor2.dumps({0: 1, 1: 1, 2: t_ns, 3: 7, 4: seq, 5: 100_000_000, 6: {},
                        7: [stage_window(n, vals) for n, vals in windows.items()]})


def birth_message(device, t_ns):
    return cbor2.dumps({0: 1, 1: 0, 2: t_ns, 3: 7, 4: device, 5: "0.1.0", 6: "test",
                        7: 100_000_000, 8: [], 9: []})


def write_recording(path, seed, factors=None, devices=("dev-a",), windows=40, per_window=100,
                    stages=STAGES, step_ns=100_000_000):
    """A recording of `windows` data messages per device, each with `per_window` spans per
    stage drawn log-normally around the stage's median times factors[stage]. Returns every
    span drawn, per stage, for exact reference figures."""
    rng = random.Random(seed)
    factors = factors or {}
    drawn = {name: [] for name in stages}
    out = bytearray(HEADER)
    t = 1_795_262_400_000_000_000
    for dev in devices:
        out += frame(f"edgemon/v1/{dev}/birth", birth_message(dev, t), t, retained=True)
    for seq in range(windows):
        for dev in devices:
            t += step_ns
            win = {}
            for name, median in stages.items():
                m = median * factors.get(name, 1.0)
                win[name] = [max(1, round(rng.lognormvariate(math.log(m), SIGMA)))
                             for _ in range(per_window)]
                drawn[name] += win[name]
            out += frame(f"edgemon/v1/{dev}/data", data_message(seq, t, win), t)
    path.write_bytes(bytes(out))
    return drawn


def two_recordings(tmp_path, seed, factors=None, **kw):
    """a.emrec (seed) and b.emrec (seed + 1, its stages scaled by factors) in tmp_path, both
    written by write_recording with kw."""
    a, b = tmp_path / "a.emrec", tmp_path / "b.emrec"
    write_recording(a, seed=seed, **kw)
    write_recording(b, seed=seed + 1, factors=factors, **kw)
    return a, b


def compare(*args):
    """Runs compare with every span a sample (--unit span) unless the test names a --unit:
    these recordings are seconds of one or two devices."""
    unit = [] if "--unit" in args else ["--unit", "span"]
    return subprocess.run([CLI, "compare", *map(str, args), *unit], capture_output=True,
                          text=True, timeout=60)


def stages_of(proc):
    doc = json.loads(proc.stdout)
    return doc, {s["name"]: s for s in doc["stages"]}


# ---- behaviour ------------------------------------------------------------------------------

def test_infer_20pct_slower_is_regressed_and_other_stages_same(tmp_path):
    a, b = tmp_path / "a.emrec", tmp_path / "b.emrec"
    da = write_recording(a, seed=1)
    db = write_recording(b, seed=2, factors={"infer": 1.2})
    p = compare(a, b, "--json")
    assert p.returncode == 1, p.stderr
    doc, st = stages_of(p)
    assert doc["regressed"] == ["infer"]
    assert doc["metric"] == "mean" and doc["threshold_pct"] == 5 and doc["alpha"] == 0.01
    infer = st["infer"]
    assert infer["verdict"] == "regressed"
    true_change = (sum(db["infer"]) / len(db["infer"])) / (sum(da["infer"]) / len(da["infer"]))
    assert abs(infer["change_pct"] - (true_change - 1) * 100) < 2
    assert abs(infer["change_pct"] - 20) < 2
    assert infer["p"] < 0.01
    assert infer["d"] > 1  # a 20% shift against ~10% spread is a large effect
    assert infer["a"]["count"] == 4000 and infer["b"]["count"] == 4000
    # The mean is exact (sum / count); the percentiles are within the scale-6 bucket error.
    assert infer["a"]["mean_ns"] == pytest.approx(sum(da["infer"]) / 4000, rel=1e-9)
    for q, key in ((0.5, "p50_ns"), (0.99, "p99_ns")):
        exact = nearest_rank(sorted(db["infer"]), q)
        assert infer["b"][key] == pytest.approx(exact, rel=0.011)
    for name in ("preprocess", "postprocess"):
        assert st[name]["verdict"] == "no significant difference"
        assert abs(st[name]["change_pct"]) < 2


def test_same_distribution_with_new_draws_exits_0(tmp_path):
    a, b = two_recordings(tmp_path, 3)
    p = compare(a, b, "--json")
    assert p.returncode == 0, p.stderr
    doc, st = stages_of(p)
    assert doc["regressed"] == []
    assert {s["verdict"] for s in st.values()} == {"no significant difference"}
    assert set(st) == set(STAGES)


def test_table_has_header_and_one_row_per_stage(tmp_path):
    a, b = two_recordings(tmp_path, 3, factors={"infer": 1.2})
    p = compare(a, b)
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["stage", "n", "A"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(STAGES)
    assert rows["infer"].endswith("regressed")
    assert rows["preprocess"].endswith("no significant difference")
    # infer's mean around 8 ms in A, shown in ms
    assert abs(float(rows["infer"].split()[3]) - 8.04) < 0.2


def test_infer_faster_is_improved_and_exits_0(tmp_path):
    a, b = two_recordings(tmp_path, 5, factors={"infer": 0.8})
    p = compare(a, b, "--json")
    assert p.returncode == 0, p.stderr
    doc, st = stages_of(p)
    assert st["infer"]["verdict"] == "improved"
    assert abs(st["infer"]["change_pct"] + 20) < 2
    assert doc["regressed"] == []


def test_small_change_below_threshold_is_same_even_when_significant(tmp_path):
    a, b = two_recordings(tmp_path, 7, factors={"infer": 1.03})
    p = compare(a, b, "--json")
    assert p.returncode == 0
    _, st = stages_of(p)
    assert st["infer"]["p"] < 0.01
    assert st["infer"]["verdict"] == "no significant difference"
    p = compare(a, b, "--json", "--threshold", "1")
    assert p.returncode == 1
    assert stages_of(p)[1]["infer"]["verdict"] == "regressed"


def test_p99_metric_judges_the_tail(tmp_path):
    a, b = two_recordings(tmp_path, 9, factors={"infer": 1.2})
    p = compare(a, b, "--json", "--metric", "p99")
    assert p.returncode == 1
    doc, st = stages_of(p)
    assert doc["metric"] == "p99"
    assert abs(st["infer"]["change_pct"] - 20) < 3


def test_stage_filter_shows_only_that_stage(tmp_path):
    a, b = two_recordings(tmp_path, 11, factors={"infer": 1.2})
    p = compare(a, b, "--json", "--stage", "preprocess")
    assert p.returncode == 0, p.stderr
    doc, st = stages_of(p)
    assert list(st) == ["preprocess"] and doc["regressed"] == []
    p = compare(a, b, "--json", "--stage", "infer")
    assert p.returncode == 1
    assert list(stages_of(p)[1]) == ["infer"]
    p = compare(a, b, "--stage", "nosuch")
    assert p.returncode == 4 and "nosuch" in p.stderr


def test_device_filter_and_stage_on_one_side_only(tmp_path):
    a, b = tmp_path / "a.emrec", tmp_path / "b.emrec"
    write_recording(a, seed=13, devices=("dev-a", "dev-b"), windows=10)
    write_recording(b, seed=14, devices=("dev-a",), windows=10,
                    stages={**STAGES, "extra": 50_000})
    p = compare(a, b, "--json")
    _, st = stages_of(p)
    assert st["infer"]["a"]["count"] == 2000 and st["infer"]["b"]["count"] == 1000
    assert st["extra"]["a"] is None and st["extra"]["verdict"] == "missing"
    assert st["extra"]["b"]["count"] == 1000
    p = compare(a, b, "--json", "--device", "dev-b")
    assert p.returncode == 4 and str(b) in p.stderr and "dev-b" in p.stderr
    p = compare(a, b, "--json", "--device", "dev-a")
    assert stages_of(p)[1]["infer"]["a"]["count"] == 1000


def test_one_span_per_side_is_too_few_and_not_judged(tmp_path):
    a, b = two_recordings(tmp_path, 15, windows=1, per_window=1, factors={"infer": 2})
    p = compare(a, b, "--json")
    assert p.returncode == 0
    _, st = stages_of(p)
    assert st["infer"]["verdict"] == "too few" and st["infer"]["p"] is None


def test_invalid_data_messages_are_skipped_and_counted(tmp_path):
    a, b = two_recordings(tmp_path, 17, windows=5)
    junk = frame("edgemon/v1/dev-a/data", b"\xff\x00garbage", 1) + \
        frame("edgemon/v1/dev-a/data", cbor2.dumps({0: 1, 1: 3, 2: 1, 3: 7, 4: True}), 2)
    b.write_bytes(b.read_bytes() + junk)
    p = compare(a, b, "--json")
    assert p.returncode == 0, p.stderr
    assert "skipped 2 invalid data messages" in p.stderr and str(b) in p.stderr
    assert stages_of(p)[1]["infer"]["b"]["count"] == 500


def test_truncated_recording_exits_4_naming_the_file(tmp_path):
    a, b = tmp_path / "a.emrec", tmp_path / "cut.emrec"
    write_recording(a, seed=19, windows=5)
    write_recording(b, seed=20, windows=5)
    b.write_bytes(b.read_bytes()[:-7])
    p = compare(a, b)
    assert p.returncode == 4
    assert str(b) in p.stderr and "truncated" in p.stderr


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, b"hello, world\n", b""],
                         ids=["png", "text", "empty"])
def test_foreign_file_exits_4_naming_the_file(tmp_path, content):
    a, b = tmp_path / "a.emrec", tmp_path / "foreign.bin"
    write_recording(a, seed=21, windows=2)
    b.write_bytes(content)
    p = compare(a, b)
    assert p.returncode == 4
    assert str(b) in p.stderr and "not an edgemon recording" in p.stderr
    p = compare(b, a)
    assert p.returncode == 4 and str(b) in p.stderr


def test_missing_file_exits_4_naming_the_file(tmp_path):
    a = tmp_path / "a.emrec"
    write_recording(a, seed=22, windows=2)
    p = compare(a, tmp_path / "nope.emrec")
    assert p.returncode == 4
    assert "nope.emrec" in p.stderr


def test_recording_without_data_messages_exits_4(tmp_path):
    a, b = tmp_path / "a.emrec", tmp_path / "births.emrec"
    write_recording(a, seed=23, windows=2)
    b.write_bytes(HEADER + frame("edgemon/v1/dev-a/birth", birth_message("dev-a", 1), 1))
    p = compare(a, b)
    assert p.returncode == 4
    assert str(b) in p.stderr and "no valid data messages" in p.stderr


@pytest.mark.parametrize("args", [
    [], ["only-one"], ["a", "b", "c"], ["a", "b", "--bogus"], ["a", "b", "--threshold", "x"],
    ["a", "b", "--threshold", "-1"], ["a", "b", "--alpha", "0"], ["a", "b", "--alpha", "1.5"],
    ["a", "b", "--metric", "p95"], ["a", "b", "--stage"],
], ids=["none", "one", "three", "unknown", "threshold-nan", "threshold-neg", "alpha-0",
        "alpha-big", "metric", "missing-value"])
def test_bad_flags_exit_2(args):
    p = compare(*args)
    assert p.returncode == 2
    assert "Try 'edgemon-cli compare --help'" in p.stderr


def test_help_prints_usage_and_exits_0():
    p = compare("--help")
    assert p.returncode == 0
    assert p.stdout.startswith("usage: edgemon-cli compare A B")
    assert "--metric" in p.stdout and "regressed" in p.stdout


# ---- the device-window as the unit (the default) ----------------------------------------------

def write_minutes(path, seed, factors=None):
    """3 devices, a data message every 30 s each for 20 minutes: 20 one-minute windows each."""
    return write_recording(path, seed, factors, devices=("d1", "d2", "d3"), windows=40,
                           step_ns=10_000_000_000)


def test_window_unit_is_the_default_and_counts_device_minutes(tmp_path):
    a, b = tmp_path / "a.emrec", tmp_path / "b.emrec"
    write_minutes(a, 31)
    write_minutes(b, 32, factors={"infer": 1.2})
    p = subprocess.run([CLI, "compare", a, b, "--json"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1, p.stderr
    doc, st = stages_of(p)
    assert doc["unit"] == "window" and doc["unit_seconds"] == 60
    infer = st["infer"]
    assert infer["verdict"] == "regressed"
    # Device-windows are epoch minutes: d1 sends at 10, 40, .. 1180 s, d2 at 20 .. 1190 s (20
    # minutes each), d3 at 30 .. 1200 s, its last message opening a 21st minute: 61.
    assert infer["a"]["units"] == 61 and infer["a"]["devices"] == 3
    assert abs(infer["change_pct"] - 20) < 3
    assert infer["ci_low_ns"] > 0
    for name in ("preprocess", "postprocess"):
        assert st[name]["verdict"] == "no significant difference"
    # Five-minute device-windows: 4 + 4 + 5 (d3's message at 1200 s again).
    p = compare(a, b, "--json", "--unit", "window", "--unit-seconds", "300")
    assert stages_of(p)[1]["infer"]["a"]["units"] == 13


def test_window_unit_same_distribution_is_no_difference(tmp_path):
    a, b = tmp_path / "a.emrec", tmp_path / "b.emrec"
    write_minutes(a, 33)
    write_minutes(b, 34)
    p = compare(a, b, "--json", "--unit", "window")
    assert p.returncode == 0, p.stderr
    _, st = stages_of(p)
    assert {s["verdict"] for s in st.values()} == {"no significant difference"}


def test_window_unit_with_seconds_of_one_device_is_too_few(tmp_path):
    a, b = two_recordings(tmp_path, 35, factors={"infer": 2})
    p = compare(a, b, "--json", "--unit", "window")
    assert p.returncode == 0, p.stderr
    _, st = stages_of(p)
    assert st["infer"]["verdict"] == "too few" and st["infer"]["a"]["units"] == 1
    p = compare(a, b, "--unit", "minutes")
    assert p.returncode == 2 and "--unit" in p.stderr
