"""Interop: Debian's cbor2 and an independent Python reading of proto/edgemon.cddl.

The Python reading is proto/python/edgemon_proto.py, written from the CDDL.

The C side writes every golden vector (proto/vectors/*.cbor) and its JSON; here cbor2 decodes
the bytes, a key table written from the CDDL (not from the C code) names the fields, and the
result must equal the JSON. Then the other way round: cbor2 encodes messages that the C
decoder (em-proto-tool) must read back to the same JSON, and random messages from the C
encoder must decode here. Run with /usr/bin/python3 (Debian's python3-cbor2, python3-pytest).
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import cbor2
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "proto" / "python"))
import edgemon_proto  # noqa: E402  (the Python reading of proto/edgemon.cddl)
from proto_tool import TOOL, c_decode, needs_tool  # noqa: E402

VECTORS = ROOT / "proto" / "vectors"

LEVELS, KINDS = edgemon_proto.LEVELS, edgemon_proto.KINDS
decode = edgemon_proto.decode


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
    # A model identity whose labels come in no particular order: both readers sort them.
    "state_model": {0: 1, 1: 2, 2: T, 3: 5, 4: 2, 5: 2, 6: 7, 14: True,
                    13: {1: "1.5", 0: "resnet18", 2: {"variant": "light", "site": "b", "_x": "1"}}},
    "data_model": {0: 1, 1: 1, 2: T, 3: 1, 4: 1, 5: 10**8, 6: {}, 7: [],
                   10: {0: "m", 1: "v", 2: {}, 9: "future key"}},
}


@needs_tool
@pytest.mark.parametrize("name", sorted(CBOR2_MESSAGES))
def test_c_decoder_reads_what_cbor2_writes(name):
    for canonical in (False, True):
        payload = cbor2.dumps(CBOR2_MESSAGES[name], canonical=canonical)
        rc, got = c_decode(payload)
        assert rc == 0, got
        assert same(got, decode(payload)), (got, decode(payload))


BAD_MODELS = {
    "label key with a leading digit": {0: "m", 1: "v", 2: {"9a": "x"}},
    "label key starting with __": {0: "m", 1: "v", 2: {"__name__": "x"}},
    "label key over 15 bytes": {0: "m", 1: "v", 2: {"k" * 16: "x"}},
    "empty label value": {0: "m", 1: "v", 2: {"k": ""}},
    "label value not printable ASCII": {0: "m", 1: "v", 2: {"k": "caf\u00e9"}},
    "nine labels": {0: "m", 1: "v", 2: {f"k{i}": "x" for i in range(9)}},
    "version over 31 bytes": {0: "m", 1: "v" * 32},
    "no version": {0: "m"},
    "a label key that is a number": {0: "m", 1: "v", 2: {7: "x"}},
}


@needs_tool
@pytest.mark.parametrize("what", sorted(BAD_MODELS))
def test_both_readers_refuse_a_model_identity_the_cddl_refuses(what):
    payload = cbor2.dumps({**CBOR2_MESSAGES["data"], 10: BAD_MODELS[what]})
    rc, got = c_decode(payload)
    assert rc == 1 and "error" in got, (what, got)
    with pytest.raises(edgemon_proto.DecodeError):
        decode(payload)


BAD_MODEL_CHANGES = {
    "a change of model that changes the level": {4: 2, 5: 1, 13: {0: "m", 1: "v"}, 14: True},
    "a change of model without a model": {4: 2, 5: 2, 14: True},
}


@needs_tool
@pytest.mark.parametrize("what", sorted(BAD_MODEL_CHANGES))
def test_both_readers_refuse_an_inconsistent_change_of_model(what):
    payload = cbor2.dumps({0: 1, 1: 2, 2: T, 3: 5, 6: 7, **BAD_MODEL_CHANGES[what]})
    rc, got = c_decode(payload)
    assert rc == 1 and got["error"] == "fields contradict each other", (what, got)
    with pytest.raises(edgemon_proto.DecodeError):
        decode(payload)


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
