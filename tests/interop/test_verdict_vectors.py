"""Interop: the breach's verdict (state key 15, flight key 16) between the C codec and the
Python reading of the CDDL's verdict section.

The golden vectors state_verdict and flight_verdict decode in Python to their JSON; verdicts
that cbor2 writes (in other key orders, with unknown integer keys, an unknown cause code, shares
as integers) decode in C (em-proto-tool) to the JSON the Python reading gives; and verdicts
breaking one of the rules V1-V4 each are refused by both readers, C with the rule's error.
Run with /usr/bin/python3 (Debian's python3-cbor2, python3-pytest).
"""

import json
import sys
from pathlib import Path

import cbor2
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "proto" / "python"))
import edgemon_proto  # noqa: E402  (the Python reading of proto/edgemon.cddl)
from proto_tool import both_refuse, c_decode, needs_tool  # noqa: E402

VECTORS = ROOT / "proto" / "vectors"
T = 1795262400000000000

def vector(name):
    return (VECTORS / f"{name}.cbor").read_bytes()


@pytest.mark.parametrize("name,key", [("state_verdict", 15), ("flight_verdict", 16)])
def test_golden_verdicts_decode_to_their_json(name, key):
    raw = cbor2.loads(vector(name))
    assert sorted(raw[key]) == [0, 1, 2, 3, 4, 5]
    want = json.loads((VECTORS / f"{name}.json").read_text())
    got = edgemon_proto.decode(vector(name))
    assert got == want
    v = got["verdict"]
    assert (v["stage"], v["statistic"], v["baseline_ns"], v["breach_ns"],
            v["nominal_windows"]) == ("infer", "p99", 26000000, 61200000, 12)
    assert [c["cause"] for c in v["causes"]] == ["cpu_contention", "unexplained", "more_work",
                                                 "memory_pressure"]
    assert [c["share"] for c in v["causes"]] == [0.81, 0.1, 0.09, 0.0]
    assert v["causes"][0]["processes"][0] == {"pid": 4122, "comm": "stress-ng", "share": 0.92}
    assert v["causes"][2]["functions"][0] == {"name": "sgemm_", "growth": 6.0}
    assert v["causes"][0]["evidence"]["runq_delay_ms_per_frame"] == 28.4


def test_messages_without_a_verdict_have_none():
    for name in ("state_degraded", "state_recovered", "flight_basic", "flight_truncated"):
        assert "verdict" not in edgemon_proto.decode(vector(name)), name


def cause(code=0, share=0.5, evidence=None, **more):
    c = {0: code, 1: share, 2: {"runq_delay_ms_per_frame": 12.5} if evidence is None else evidence}
    c.update({int(k[1:]): v for k, v in more.items()})
    return c


def verdict(causes=None, **more):
    v = {0: "infer", 1: "p99", 2: 26000000, 3: 61200000, 4: 12,
         5: [cause()] if causes is None else causes}
    for k, value in more.items():
        if value is None:
            del v[int(k[1:])]
        else:
            v[int(k[1:])] = value
    return v


def state(v):
    return {0: 1, 1: 2, 2: T, 3: 5, 4: 2, 5: 0, 6: 99, 7: "infer.p99", 15: v}


def flight(v):
    return {0: 1, 1: 5, 2: T, 3: 9, 4: 0, 5: {0: 0, 1: 2, 2: 0}, 6: 1000, 7: 200, 8: 100, 9: 50,
            10: ["infer"], 11: [], 12: [], 13: [], 16: v}


GOOD = {
    "reordered keys, unknown integer keys": {
        5: [{2: {"b": 1, "a": -2.5}, 99: [1, 2], 1: 1, 0: 4}], 4: 0, 3: 9, 2: 3, 1: "mean",
        0: "capture", 42: {"later": True}},
    "an unknown cause code": verdict([cause(code=200, share=0.75), cause(code=7, share=0.25)]),
    "shares as integers, processes and functions": verdict([
        cause(share=1, k3=[[4122, "stress-ng", 1], [7, "kworker/u8:2 ü", 0.0]]),
        cause(code=6, share=0, k4=[["sgemm_", 6], ["im2col", -1.5]])]),
    "no causes": verdict([]),
    "eight causes, sixteen figures": verdict(
        [cause(share=1 - i / 8, evidence={f"f{j}": j for j in range(16)}) for i in range(8)]),
}


@needs_tool
@pytest.mark.parametrize("what", sorted(GOOD))
@pytest.mark.parametrize("carrier", [state, flight])
def test_c_decoder_reads_the_verdicts_cbor2_writes(what, carrier):
    payload = cbor2.dumps(carrier(GOOD[what]))
    rc, got = c_decode(payload)
    assert rc == 0, got
    assert got == edgemon_proto.decode(payload)
    if what == "an unknown cause code":
        assert got["verdict"]["causes"][0]["cause"] == "unknown"
        assert got["verdict"]["causes"][0]["code"] == 200


# Each breaks one rule of the verdict section: (name, verdict map, C's error text).
BAD = [
    ("share above 1", verdict([cause(share=1.5)]), "value out of range"),
    ("share below 0", verdict([cause(share=-1)]), "value out of range"),
    ("share null", verdict([cause(share=None)]), "wrong CBOR type for a field"),
    ("causes not in descending share", verdict([cause(share=0.25), cause(share=0.5)]),
     "fields contradict each other"),
    ("nine causes", verdict([cause()] * 9), "too many items"),
    ("seventeen figures", verdict([cause(evidence={f"f{j}": j for j in range(17)})]),
     "too many items"),
    ("evidence keyed by a number", verdict([cause(evidence={1: 2})]),
     "map key is not an unsigned integer"),
    ("evidence null", verdict([cause(evidence={"x": None})]), "wrong CBOR type for a field"),
    ("evidence name not printable", verdict([cause(evidence={"caf\u00e9": 1})]),
     "string too long, empty or not printable"),
    ("a text key in the verdict", {**verdict(), "later": 1}, "map key is not an unsigned integer"),
    ("a text key in a cause", verdict([{**cause(), "later": 1}]),
     "map key is not an unsigned integer"),
    ("no causes key", verdict(k5=None), "required key missing"),
    ("no statistic", verdict(k1=None), "required key missing"),
    ("a cause without evidence", verdict([{0: 0, 1: 0.5}]), "required key missing"),
    ("a process of two items", verdict([cause(k3=[[1, "x"]])]), "wrong CBOR type for a field"),
    ("a process share above 1", verdict([cause(k3=[[1, "x", 2]])]), "value out of range"),
    ("an empty comm", verdict([cause(k3=[[1, "", 0.5]])]),
     "string too long, empty or not printable"),
    ("a pid past uint32", verdict([cause(k3=[[1 << 32, "x", 0.5]])]), "value out of range"),
    ("nine processes", verdict([cause(k3=[[1, "x", 0.1]] * 9)]), "too many items"),
    ("a NaN growth", verdict([cause(k4=[["f", float("nan")]])]), "value out of range"),
    ("nine functions", verdict([cause(k4=[["f", 1]] * 9)]), "too many items"),
    ("a stage name with a space", verdict(k0="in fer"), "string too long, empty or not printable"),
    ("nominal windows past uint32", verdict(k4=1 << 32), "value out of range"),
    ("a cause code past uint32", verdict([cause(code=1 << 32)]), "value out of range"),
    ("a verdict that is not a map", [1, 2], "wrong CBOR type for a field"),
]


@needs_tool
@pytest.mark.parametrize("name,raw,error", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("carrier", [state, flight])
def test_both_readers_refuse_a_broken_verdict(name, raw, error, carrier):
    both_refuse(cbor2.dumps(carrier(raw)), edgemon_proto.decode, edgemon_proto.DecodeError, error)
