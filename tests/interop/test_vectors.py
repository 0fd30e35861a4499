"""Interop: Debian's cbor2 and an independent Python reading of proto/edgemon.cddl.

The C side writes every golden vector (proto/vectors/*.cbor) and its JSON; here cbor2 decodes
the bytes, a key table written from the CDDL (not from the C code) names the fields, and the
result must equal the JSON. Then the other way round: cbor2 encodes messages that the C
decoder (em-proto-tool) must read back to the same JSON, and random messages from the C
encoder must decode here. Run with /usr/bin/python3 (Debian's python3-cbor2, python3-pytest).
"""

import json
import math
import os
import subprocess
from pathlib import Path

import cbor2
import pytest

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "proto" / "vectors"
TOOL = os.environ.get("EM_PROTO_TOOL")

LEVELS = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"]
KINDS = ["birth", "data", "state", "status", "cmd"]
METRIC_KINDS = ["gauge", "counter", "delta"]

# Keys per map, from proto/edgemon.cddl.
COMMON = {0: "v", 1: "kind", 2: "time_ns", 3: "session"}
BIRTH = {4: "device", 5: "agent_version", 6: "board", 7: "period_ns", 8: "metrics", 9: "budgets"}
METRIC = {0: "alias", 1: "name", 2: "unit", 3: "kind", 4: "absent_reason"}
BUDGET = {0: "id", 1: "rule", 2: "level", 3: "bound", 4: "stage", 5: "window_ns"}
DATA = {4: "seq", 5: "window_ns", 6: "values", 7: "stages", 8: "level", 9: "historical"}
STAGE = {0: "name", 1: "count", 2: "sum_ns", 3: "min_ns", 4: "max_ns", 5: "p50_ns",
         6: "p90_ns", 7: "p99_ns", 8: "p999_ns", 9: "scale", 10: "zero_count", 11: "buckets"}
STATE = {4: "level", 5: "prev_level", 6: "mono_ns", 7: "rule", 8: "stage", 9: "value",
         10: "bound", 11: "reason"}
STATUS = {4: "online"}
CMD = {4: "command"}
PER_KIND = {"birth": BIRTH, "data": DATA, "state": STATE, "status": STATUS, "cmd": CMD}


def named(raw, keys):
    """Renames a CBOR map's integer keys; unknown keys are dropped as v1 readers must."""
    assert isinstance(raw, dict)
    assert all(isinstance(k, int) and k >= 0 for k in raw), raw
    return {keys[k]: v for k, v in raw.items() if k in keys}


def stage(raw):
    s = named(raw, STAGE)
    if s["count"] > 0:
        s.setdefault("zero_count", 0)
        flat, buckets, index = s["buckets"], [], None
        assert len(flat) % 2 == 0
        for i in range(0, len(flat), 2):
            index = flat[i] if i == 0 else index + flat[i]
            buckets.append([index, flat[i + 1]])
        s["buckets"] = buckets
    return s


def decode(payload):
    """cbor2 bytes -> the named form the JSON files hold."""
    raw = cbor2.loads(payload)
    kind = KINDS[raw[1]]
    msg = named(raw, {**COMMON, **PER_KIND[kind]})
    msg["kind"] = kind
    if kind == "birth":
        msg["metrics"] = [named(m, METRIC) for m in msg["metrics"]]
        for m in msg["metrics"]:
            m["kind"] = METRIC_KINDS[m["kind"]]
        msg["budgets"] = [named(b, BUDGET) for b in msg["budgets"]]
        for b in msg["budgets"]:
            b["level"] = LEVELS[b["level"]]
    elif kind == "data":
        msg["values"] = {str(k): v for k, v in sorted(msg["values"].items())}
        msg["stages"] = [stage(s) for s in msg["stages"]]
        if "level" in msg:
            msg["level"] = LEVELS[msg["level"]]
    elif kind == "state":
        msg["level"] = LEVELS[msg["level"]]
        msg["prev_level"] = LEVELS[msg["prev_level"]]
    elif kind == "cmd":
        msg["command"] = {1: "rebirth"}[msg["command"]]
    return msg


def same(a, b):
    """Deep equality that also requires ints to stay ints and floats floats."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and (a == b or math.isnan(a) and math.isnan(b))
    return a == b


GOLDEN = sorted(VECTORS.glob("*.cbor"))


def test_there_is_a_vector_for_every_kind_and_edge_case():
    names = {p.stem for p in GOLDEN}
    for kind in KINDS:
        assert any(n.startswith(kind) for n in names), kind
    for edge in ["data_empty_stages", "data_counter_absent", "data_largest", "data_alias_widths"]:
        assert edge in names


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_cbor2_decodes_the_golden_vector_to_its_json(path):
    want = json.loads(path.with_suffix(".json").read_text())
    got = decode(path.read_bytes())
    assert same(got, want), f"{path.stem}:\n got {got}\nwant {want}"


def test_the_largest_vector_is_exactly_the_limit():
    assert (VECTORS / "data_largest.cbor").stat().st_size == 65536


def test_alias_widths_use_1_2_and_3_byte_heads():
    raw = (VECTORS / "data_alias_widths.cbor").read_bytes()
    for head in (bytes([0x17]), bytes([0x18, 0x18]), bytes([0x18, 0xFF]),
                 bytes([0x19, 0x01, 0x00]), bytes([0x19, 0xFF, 0xFF])):
        assert head in raw


def test_an_absent_counter_is_null_not_zero():
    raw = cbor2.loads((VECTORS / "data_counter_absent.cbor").read_bytes())
    assert raw[6] == {0: None, 2: 0}


needs_tool = pytest.mark.skipif(not TOOL, reason="EM_PROTO_TOOL not set (run through ctest)")


def c_decode(payload):
    r = subprocess.run([TOOL, "decode"], input=payload, capture_output=True, timeout=30)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


T = 1795262400000000000
CBOR2_MESSAGES = {
    "status": {0: 1, 1: 3, 2: T, 3: 7, 4: True},
    "cmd": {0: 1, 1: 4, 2: T, 4: 1},
    "state": {0: 1, 1: 2, 2: T, 3: 5, 4: 3, 5: 2, 6: 99, 7: "rss.cap", 9: 2.5e9, 10: 2147483648,
              11: "RSS 2.5 GB > 2 GiB"},
    "data": {0: 1, 1: 1, 2: T, 3: 1, 4: 17, 5: 100000000, 6: {9: 1.5, 3: None, 700: -4},
             7: [{0: "infer", 1: 3, 2: 30, 3: 5, 4: 15, 5: 10, 6: 14, 7: 15, 8: 15, 9: 6,
                  11: [-3, 1, 4, 2]}, {0: "idle", 1: 0}], 8: 2, 99: {"future": [1, 2]}},
    "birth": {0: 1, 1: 0, 2: T, 3: 1, 4: "dev-1", 5: "0.1.0", 6: "generic-x86_64", 7: 10**8,
              8: [{0: 3, 1: "mem.rss", 2: "By", 3: 0}], 9: [{0: "x", 1: "deadline", 2: 3, 3: 0.5}]},
}


@needs_tool
@pytest.mark.parametrize("name", sorted(CBOR2_MESSAGES))
def test_c_decoder_reads_what_cbor2_writes(name):
    for canonical in (False, True):
        payload = cbor2.dumps(CBOR2_MESSAGES[name], canonical=canonical)
        rc, got = c_decode(payload)
        assert rc == 0, got
        assert same(got, decode(payload)), (got, decode(payload))


@needs_tool
def test_c_decoder_reports_garbage_with_an_offset():
    rc, got = c_decode(cbor2.dumps({0: 1, 1: 3, 2: T, 3: 7, 4: "yes"}))
    assert rc == 1
    assert got["error"] == "wrong CBOR type for a field"
    # a5 | 00 01 | 01 03 | 02 1b+8 bytes | 03 07 | 04 -> the value starts at byte 18.
    assert got["offset"] == 18


@needs_tool
def test_random_messages_from_the_c_encoder_decode_with_cbor2(tmp_path):
    subprocess.run([TOOL, "random", "20261121", "300", str(tmp_path)], check=True, timeout=60)
    files = sorted(tmp_path.glob("*.cbor"))
    assert len(files) == 300
    for path in files:
        want = json.loads(path.with_suffix(".json").read_text())
        assert same(decode(path.read_bytes()), want), path.name
