"""Interop: stack profiles (kind 6) between the C codec and the Python reading of the CDDL.

The golden profile vectors decode in Python (proto/python/edgemon_proto.py, written from the
CDDL's profile section) to exactly the JSON the C printer wrote beside them. Profiles that
cbor2 writes (other key orders, unknown keys, trigger keys 5 and 6) decode in C (em-proto-tool)
to the JSON the Python reading gives, and inputs breaking one rule each are refused by both.
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
from proto_tool import c_decode, needs_tool  # noqa: E402

VECTORS = ROOT / "proto" / "vectors"
NAMES = ("profile_basic", "profile_command", "profile_truncated")


def vector(name, ext="cbor"):
    return (VECTORS / f"{name}.{ext}").read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_golden_profiles_read_in_python_as_the_c_printer_wrote_them(name):
    want = json.loads(vector(name, "json"))
    assert edgemon_proto.decode_profile(vector(name)) == want
    assert edgemon_proto.decode(vector(name)) == want


def test_profile_basic_on_the_wire():
    raw = cbor2.loads(vector("profile_basic"))
    assert raw[1] == 6 and raw[8] == 99 and raw[9] == "cpu-clock"
    assert len(raw[13]) == 3 * 8 and raw[13][15:18] == [1, "do_syscall_64", None]
    assert raw[14][0] == [412, 0, 1, 0, 1, 2, 3, 4]
    assert raw[14][-1] == [0, 48000000, None, 0, 1, 5]
    assert 16 not in raw and 17 not in raw and 5 not in raw[5] and 6 not in raw[5]
    kinds = {f["kind"] for f in edgemon_proto.decode_profile(vector("profile_basic"))["frames"]}
    assert kinds == {"native", "kernel", "python", "unknown"}
    t = cbor2.loads(vector("profile_truncated"))
    assert t[16] == {0: 1290, 1: 517} and t[17] is True


def test_cmd_profile_and_birth_profiler():
    assert cbor2.loads(vector("cmd_profile"))[4] == 3
    assert edgemon_proto.decode(vector("cmd_profile"))["seconds"] == 5
    birth = edgemon_proto.decode(vector("birth_profiler"))
    assert birth["profiler"] == {"hz": 99, "seconds": 5, "max_seconds": 30, "min_gap_seconds": 60}
    assert "profiler" not in edgemon_proto.decode(vector("birth_full"))


def base():
    return cbor2.loads(vector("profile_basic"))


@needs_tool
def test_cbor2_written_profiles_decode_the_same_in_c():
    raw = base()
    raw[40] = {"unknown": [1, 2]}  # an unknown key, skipped
    raw[5][5] = 52.5               # a measured value: not the profile's, skipped
    reordered = {k: raw[k] for k in sorted(raw, reverse=True) if k > 1}
    msg = {0: 1, 1: 6, **reordered}
    rc, got = c_decode(cbor2.dumps(msg))
    assert rc == 0, got
    assert got == edgemon_proto.decode_profile(cbor2.dumps(msg))
    assert got == json.loads(vector("profile_basic", "json"))


BREAKS = {
    "stage index past its table": lambda r: r[14][0].__setitem__(2, 2),
    "frame index past its table": lambda r: r[14][0].__setitem__(3, 8),
    "stacks not descending": lambda r: r[14].reverse(),
    "a stack without frames": lambda r: r[14].__setitem__(0, [412, 0, 1]),
    "neither samples nor off-CPU": lambda r: r[14][-1].__setitem__(1, 0),
    "stage twice": lambda r: r.__setitem__(12, ["infer", "infer"]),
    "hz 0": lambda r: r.__setitem__(8, 0),
    "hz 1001": lambda r: r.__setitem__(8, 1001),
    "an unknown clock": lambda r: r.__setitem__(9, "cycles"),
    "frames not 3 each": lambda r: r[13].pop(),
    "frame kind 4": lambda r: r[13].__setitem__(0, 4),
    "empty frame name": lambda r: r[13].__setitem__(1, ""),
    "a stack 257 deep": lambda r: r[14].__setitem__(0, [412, 0, 1] + [0] * 257),
    "17 notes": lambda r: r.__setitem__(15, ["x"] * 17),
    "missing stacks": lambda r: r.pop(14),
}


@needs_tool
@pytest.mark.parametrize("what", sorted(BREAKS))
def test_a_broken_rule_is_refused_by_both(what):
    raw = base()
    BREAKS[what](raw)
    payload = cbor2.dumps(raw)
    with pytest.raises(edgemon_proto.DecodeError):
        edgemon_proto.decode_profile(payload)
    rc, got = c_decode(payload)
    assert rc == 1 and "error" in got, got
