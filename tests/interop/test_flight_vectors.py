"""Interop: flight recordings (kind 5) between the C codec and the Python reading of the CDDL.

The golden flight vectors decode in Python (proto/python/edgemon_proto.py, written from the
CDDL's flight section) to their absolute figures: tick times, counter totals, frame ids and
span starts rebuilt from the deltas, every rule of the section checked. Flight recordings that
cbor2 writes (in other key orders, with unknown keys, with 65-bit deltas) decode in C
(em-proto-tool) to the JSON the Python reading gives, and inputs breaking one rule each are
refused by both. Run with /usr/bin/python3 (Debian's python3-cbor2, python3-pytest).
"""

import random
import sys
from pathlib import Path

import cbor2
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "proto" / "python"))
import edgemon_proto  # noqa: E402  (the Python reading of proto/edgemon.cddl)
from proto_tool import both_refuse, c_decode, needs_tool  # noqa: E402

VECTORS = ROOT / "proto" / "vectors"
U64 = 1 << 64
MONO = 123456789012345  # the golden recordings' trigger on the device's CLOCK_MONOTONIC
MS = 1000000


def vector(name):
    return (VECTORS / f"{name}.cbor").read_bytes()


def test_there_are_flight_vectors_and_a_birth_with_a_recorder():
    for name in ("flight_basic", "flight_command", "flight_truncated", "birth_flight_recorder",
                 "cmd_flight"):
        assert (VECTORS / f"{name}.cbor").exists(), name
    birth = edgemon_proto.decode(vector("birth_flight_recorder"))
    assert birth["flight_recorder"] == {"pre_ns": 10 * 10**9, "post_ns": 2 * 10**9, "ticks": 120,
                                        "spans": 16384, "bytes": 917504}
    assert "flight_recorder" not in edgemon_proto.decode(vector("birth_full"))
    assert cbor2.loads(vector("cmd_flight"))[4] == 2
    assert edgemon_proto.decode(vector("cmd_flight"))["command"] == "flight"


def test_flight_basic_rebuilds_absolute_figures_from_its_deltas():
    raw = cbor2.loads(vector("flight_basic"))
    # On the wire: the first tick 200 ms before the trigger, the others +100 ms each; the
    # counter column 0 as its total, then increases; column 2 missing from the second tick.
    assert [t[0] for t in raw[12]] == [-200 * MS, 100 * MS, 100 * MS, 100 * MS]
    assert [t[1].get(0) for t in raw[12]] == [1000, 12, 18, 1]
    assert [2 in t[1] for t in raw[12]] == [True, False, True, False]
    assert all(t[1][3] is None for t in raw[12])
    frames = raw[13][1::4]
    assert frames == [41, 0, 1, 1, -1, 2, -1]  # backwards across stages
    assert raw[13][2] == -180 * MS and all(d >= 0 for d in raw[13][6::4])
    assert 14 not in raw and 15 not in raw

    f = edgemon_proto.decode_flight(vector("flight_basic"))
    assert [t["mono_ns"] for t in f["ticks"]] == [MONO - 200 * MS, MONO - 100 * MS, MONO,
                                                  MONO + 100 * MS]
    assert [t["values"][0] for t in f["ticks"]] == [1000, 1012, 1030, 1031]
    assert [t["values"][1] for t in f["ticks"]] == [734003200, 734011392, 734019584, 734019584]
    assert [t["values"].get(2) for t in f["ticks"]] == [0.5, None, 1.25, None]
    assert [(s["stage"], s["frame"]) for s in f["spans"]] == [
        (0, 41), (1, 41), (0, 42), (0, 43), (1, 42), (0, 44), (1, 43)]
    assert [s["start_ns"] - MONO for s in f["spans"]] == [
        -180 * MS, -171 * MS, -80 * MS, -40 * MS, -30 * MS, 20 * MS, 23 * MS]
    assert f["trigger"] == {"cause": "escalation", "level": "DEGRADED", "prev_level": "NOMINAL",
                            "rule": "infer.p99", "stage": "infer", "value": 52000000,
                            "bound": 40000000,
                            "reason": "infer p99 52.0 ms > 40.0 ms for 3 windows"}


def test_flight_command_and_truncated():
    f = edgemon_proto.decode_flight(vector("flight_command"))
    assert f["trigger"] == {"cause": "command", "level": "NOMINAL",
                            "reason": "requested on cmd/flight"}
    assert 2 not in cbor2.loads(vector("flight_command"))[5]
    f = edgemon_proto.decode_flight(vector("flight_truncated"))
    assert f["truncated"] == {"spans_cut": 2880, "ticks_cut": 118, "spans_overwritten": 4096}
    assert f["historical"] is True
    # Cut ticks do not break the counters: the first kept carrier holds its total.
    assert cbor2.loads(vector("flight_truncated"))[12][0][1][0] == 1030


# --- recordings cbor2 writes ------------------------------------------------------------------

def base():
    """A small valid recording as a raw map: 2 stages, a counter and a gauge column."""
    return {0: 1, 1: 5, 2: 1795262405000000000, 3: 9, 4: 2,
            5: {0: 0, 1: 2, 2: 1, 3: "infer.p99", 4: "infer", 5: 41.5, 6: 40, 7: "p99 over"},
            6: 1000, 7: 200, 8: 100, 9: 50,
            10: ["capture", "infer"], 11: [["ctx", "1", 1], ["rss", "By", 0]],
            12: [[-100, {0: 10, 1: 5}], [50, {0: 3}], [50, {0: None, 1: -2.5}], [1, {0: -13}]],
            13: [0, 7, -90, 4, 1, 0, 5, 30, 0, 8, 20, 4, 1, -1, 0, 31]}


@needs_tool
@pytest.mark.parametrize("canonical", [False, True])
def test_c_decoder_reads_what_cbor2_writes(canonical):
    payload = cbor2.dumps(base(), canonical=canonical)
    rc, got = c_decode(payload)
    assert rc == 0, got
    assert got == edgemon_proto.decode(payload)
    assert [t["values"].get("ctx") for t in got["ticks"]] == [10, 3, None, -13]
    assert edgemon_proto.decode_flight(payload)["ticks"][3]["values"][0] == 0


@needs_tool
def test_key_order_and_unknown_keys_do_not_matter():
    raw = base()
    reordered = {0: 1, 1: 5, 99: {"later": [1, 2.5]}}
    for k in (13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2):
        reordered[k] = raw[k]
    reordered[5] = {**raw[5], 42: None}
    reordered[14] = {7: "unknown", 2: 3}
    rc, got = c_decode(cbor2.dumps(reordered))
    assert rc == 0, got
    want = edgemon_proto.decode(cbor2.dumps(raw))
    want["truncated"] = {"spans_cut": 0, "ticks_cut": 0, "spans_overwritten": 3}
    assert got == want == edgemon_proto.decode(cbor2.dumps(reordered))


def random_flight(rng):
    """A random valid recording with deltas anywhere in [-2^64, 2^64)."""
    def u64():
        return rng.choice([rng.randrange(30), U64 - 1 - rng.randrange(30), rng.getrandbits(64)])
    trigger = u64()
    stages = [f"s{i}" for i in range(1 + rng.randrange(5))]
    columns = [[f"c.{i}", "1", rng.randrange(3)] for i in range(rng.randrange(6))]
    ticks, prev_time, totals = [], trigger, {}
    times = sorted(u64() for _ in range(rng.randrange(12)))
    for i, time in enumerate(times):
        values = {}
        for c, col in enumerate(columns):
            if rng.random() < 0.25:
                continue
            if rng.random() < 0.2:
                values[c] = None
            elif col[2] == 1:
                total = u64()
                values[c] = total - totals.get(c, 0)
                totals[c] = total
            else:
                values[c] = rng.choice([rng.getrandbits(64), -rng.getrandbits(63) - 1,
                                        rng.uniform(-1e12, 1e12)])
        ticks.append([time - prev_time, values])
        prev_time = time
    spans, frame, start = [], 0, trigger
    for s_start in sorted(u64() for _ in range(rng.randrange(12))):
        f = u64()
        spans += [rng.randrange(len(stages)), f - frame, s_start - start, u64()]
        frame, start = f, s_start
    raw = {0: 1, 1: 5, 2: u64(), 3: rng.getrandbits(32), 4: rng.getrandbits(32),
           5: {0: 1, 1: 0}, 6: trigger, 7: u64(), 8: u64(), 9: u64(), 10: stages,
           11: columns, 12: ticks, 13: spans}
    if rng.random() < 0.5:
        raw[14] = {0: u64(), 2: u64()}
    return raw


@needs_tool
def test_random_recordings_from_cbor2_decode_alike_in_c():
    rng = random.Random(20261125)
    for _ in range(60):
        payload = cbor2.dumps(random_flight(rng))
        rc, got = c_decode(payload)
        assert rc == 0, got
        assert got == edgemon_proto.decode(payload)


def broken(**changes):
    raw = base()
    for key, value in changes.items():
        k = int(key[1:])
        if value is None:
            del raw[k]
        else:
            raw[k] = value
    return raw


def tick_values(**values):
    return [[-100, {0: 10, 1: 5}], [50, {**{0: 3}, **{int(k[1:]): v for k, v in values.items()}}]]


# Each breaks one rule of the CDDL's flight section: (name, raw map, C's error text).
BAD = [
    ("stage index past the table", broken(k13=[2, 0, 0, 1]), "value out of range"),
    ("column index past the table", broken(k12=tick_values(c7=1)), "value out of range"),
    ("tick time backwards", broken(k12=[[-100, {}], [-1, {}]]), "fields contradict each other"),
    ("span start backwards", broken(k13=[0, 0, 0, 1, 0, 0, -1, 1]), "fields contradict each other"),
    ("counter total below 0", broken(k12=[[0, {0: 5}], [0, {0: -6}]]), "value out of range"),
    ("counter total past uint64", broken(k12=[[0, {0: U64 - 1}], [0, {0: 1}]]),
     "value out of range"),
    ("counter as a float", broken(k12=[[0, {0: 1.5}]]), "wrong CBOR type for a field"),
    ("frame id below 0", broken(k13=[0, -1, 0, 1]), "value out of range"),
    ("first tick before time 0", broken(k6=5, k12=[[-6, {}]]), "value out of range"),
    ("stage named twice", broken(k10=["a", "a"]), "duplicate map key"),
    ("stage name with a space", broken(k10=["a b"]), "string too long, empty or not printable"),
    ("spans not in fours", broken(k13=[0, 0, 0]), "fields contradict each other"),
    ("tick of three items", broken(k12=[[0, {}, 1]]), "wrong CBOR type for a field"),
    ("column kind 3", broken(k11=[["x", "1", 3]]), "value out of range"),
    ("unit too long", broken(k11=[["x", "0123456789abcdef", 0]]),
     "string too long, empty or not printable"),
    ("no spans", broken(k13=None), "required key missing"),
    ("trigger without a level", broken(k5={0: 0}), "required key missing"),
    ("trigger cause 2", broken(k5={0: 2, 1: 0}), "value out of range"),
    ("NaN gauge", broken(k12=[[0, {1: float("nan")}]]), "value out of range"),
    ("65 stages", broken(k10=[f"s{i}" for i in range(65)]), "too many items"),
    ("number past uint32", broken(k4=1 << 32), "value out of range"),
    ("historical not a bool", broken(k15=1), "wrong CBOR type for a field"),
]


@needs_tool
@pytest.mark.parametrize("name,raw,error", BAD, ids=[b[0] for b in BAD])
def test_both_refuse_a_broken_rule(name, raw, error):
    both_refuse(cbor2.dumps(raw), edgemon_proto.decode_flight, edgemon_proto.DecodeError, error)
