"""`edgemon-cli decode`: golden vectors as JSON and diagnostic notation, standard input,
invalid messages, and recordings (births naming the values of later data messages, invalid
records, corrupt framing).

No broker: the command reads files. Recordings are written here from the framing in
host/lib/recording.h, with a CRC-32C computed in Python, so the test does not trust the C
writer it would be checking against.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import cbor2
import pytest

from recordings import crc32c, encode_record, recording

ROOT = Path(__file__).resolve().parents[2]
VECTORS = sorted((ROOT / "proto" / "vectors").glob("*.cbor"))
CLI = os.environ.get("EM_CLI")

pytestmark = pytest.mark.skipif(not CLI, reason="EM_CLI (path of edgemon-cli) not set")

DEVICE = "orin-07.lab:left"  # The device of birth_full.cbor (session 3735928559).


def run(*args, stdin=None):
    """Runs `edgemon-cli decode ARGS`; stdin is bytes or None (then an empty pipe)."""
    return subprocess.run([CLI, "decode", *map(str, args)], input=stdin if stdin else b"",
                          capture_output=True, timeout=60)


def vector(name):
    return (ROOT / "proto" / "vectors" / name).read_bytes()


def test_crc32c_known_answer():
    # RFC 3720 B.4 / the usual check value.
    assert crc32c(b"123456789") == 0xE3069283


def record(topic, payload, recv_time_ns=1_795_262_400_000_000_000, retained=False):
    return encode_record(topic, payload, recv_time_ns, retained)


def lines(proc):
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


# ---- single messages -----------------------------------------------------------------------

@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_json_of_every_vector_equals_its_json_file(path):
    p = run(path)
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode()
    assert out.endswith("\n") and out.count("\n") == 1, out
    assert json.loads(out) == json.loads(path.with_suffix(".json").read_text())


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_diag_of_every_vector_is_one_line(path):
    p = run(path, "--diag")
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode()
    assert out.endswith("\n") and out.count("\n") == 1, out
    text = out.strip()
    assert text.startswith("{") and text.endswith("}")
    # The top-level keys are the map's keys, in the encoder's order.
    raw = cbor2.loads(path.read_bytes())
    first = next(iter(raw))
    assert text.startswith("{%d: " % first)


def test_diag_shows_the_device_strings_of_a_birth():
    p = run(ROOT / "proto" / "vectors" / "birth_full.cbor", "--diag")
    assert p.returncode == 0
    raw = cbor2.loads(vector("birth_full.cbor"))
    text = p.stdout.decode()
    assert '4: "%s"' % raw[4] in text
    assert '"%s"' % raw[5] in text  # agent version
    # Metric names appear as quoted strings; the rule bound 12.5 as a float.
    assert '"pmu.cycles"' in text and '"psi.cpu.some.avg10"' in text
    assert "12.5" in text


def test_diag_shows_floats_and_nulls_of_data():
    p = run(ROOT / "proto" / "vectors" / "data_basic.cbor", "--diag")
    assert p.returncode == 0
    text = p.stdout.decode()
    assert "0: null, 1: null" in text
    assert "1.375" in text and '"infer"' in text


def test_diag_shows_utf8_text_as_is():
    p = run(ROOT / "proto" / "vectors" / "state_utf8.cbor", "--diag")
    assert p.returncode == 0
    assert cbor2.loads(vector("state_utf8.cbor"))[11] in p.stdout.decode()


@pytest.mark.parametrize("args", [["-"], []], ids=["dash", "no-argument"])
def test_stdin(args):
    data = vector("data_basic.cbor")
    p = run(*args, stdin=data)
    assert p.returncode == 0, p.stderr.decode()
    assert json.loads(p.stdout) == json.loads(
        (ROOT / "proto" / "vectors" / "data_basic.json").read_text())
    p = run(*args, "--diag", stdin=data)
    assert p.returncode == 0
    assert p.stdout.decode().startswith("{0: 1, 1: 1, ")


def test_options_may_follow_the_file():
    p = run(ROOT / "proto" / "vectors" / "status_online.cbor", "--diag")
    assert p.returncode == 0
    assert p.stdout.decode() == "{0: 1, 1: 3, 2: 1795262400000000000, 3: 7, 4: true}\n"


def test_corrupt_byte_is_invalid_at_its_offset(tmp_path):
    data = bytearray(vector("status_online.cbor"))
    assert data[:3] == b"\xa5\x00\x01"  # {0: 1, ...: the version is the item at byte 2
    data[2] = 0x02
    f = tmp_path / "bad.cbor"
    f.write_bytes(bytes(data))
    p = run(f)
    assert p.returncode == 1
    assert p.stdout == b""
    err = p.stderr.decode()
    assert f"{f}: invalid message at byte 2: " in err
    assert "version" in err


def test_corrupt_message_in_diag_mode_still_shows_the_notation(tmp_path):
    data = bytearray(vector("status_online.cbor"))
    data[2] = 0x02
    f = tmp_path / "bad.cbor"
    f.write_bytes(bytes(data))
    p = run(f, "--diag")
    assert p.returncode == 1
    assert p.stdout.decode().startswith("{0: 2, 1: 3, ")
    assert "invalid message at byte 2" in p.stderr.decode()


@pytest.mark.parametrize("name", ["data_basic.cbor", "birth_full.cbor", "state_utf8.cbor"])
def test_truncated_vector_is_invalid(name, tmp_path):
    data = vector(name)
    f = tmp_path / "cut.cbor"
    f.write_bytes(data[:-3])
    for mode in ("--json", "--diag"):
        p = run(f, mode)
        assert p.returncode == 1, (mode, p.stderr)
        # Not well-formed: nothing on stdout, not even the notation.
        assert p.stdout == b""
        m = re.search(rb"invalid message at byte (\d+): message truncated", p.stderr)
        assert m, p.stderr
        assert int(m.group(1)) <= len(data) - 3


def test_trailing_byte_is_invalid_at_the_end():
    data = vector("status_online.cbor")
    p = run("-", stdin=data + b"\x00")
    assert p.returncode == 1
    assert f"stdin: invalid message at byte {len(data)}: " in p.stderr.decode()


def test_indefinite_cbor_is_shown_then_refused():
    # Well-formed CBOR that v1 refuses: the engineer sees why.
    p = run("--diag", stdin=bytes.fromhex("bf0001ff"))
    assert p.stdout == b"{_ 0: 1}\n"
    assert p.returncode == 1
    assert "invalid message at byte 0: indefinite-length" in p.stderr.decode()


def test_missing_file_exits_4(tmp_path):
    p = run(tmp_path / "nope.cbor")
    assert p.returncode == 4
    assert "nope.cbor" in p.stderr.decode()


def test_empty_input_exits_4(tmp_path):
    f = tmp_path / "empty.cbor"
    f.write_bytes(b"")
    assert run(f).returncode == 4
    p = run("-")
    assert p.returncode == 4
    assert "empty" in p.stderr.decode()


def test_oversized_message_exits_4(tmp_path):
    f = tmp_path / "big.cbor"
    f.write_bytes(b"\x00" * (1024 * 1024 + 1))
    p = run(f)
    assert p.returncode == 4
    assert "too large" in p.stderr.decode()


# ---- flight recordings and profiles past the other kinds' cap ------------------------------

PROTO_TOOL = os.environ.get("EM_PROTO_TOOL")
# The caps as the C headers state them, read from there rather than typed here.
HEADERS = ROOT / "proto" / "include" / "edgemon"


def header_cap(header, name):
    m = re.search(rf"#define {name}\s+(\d+)u", (HEADERS / header).read_text())
    assert m, f"{name} not in {header}"
    return int(m.group(1))


MESSAGE_CAP = header_cap("proto.h", "EM_PROTO_MAX_MESSAGE_BYTES")
KIND_CAPS = {"flight": header_cap("flight.h", "EM_FLIGHT_MAX_BYTES"),
             "profile": header_cap("profile.h", "EM_PROFILE_MAX_BYTES")}


def largest(kind, cap=None):
    """The largest valid recording or profile under cap bytes (em-proto-tool largest)."""
    assert PROTO_TOOL, "EM_PROTO_TOOL must name em-proto-tool"
    p = subprocess.run([PROTO_TOOL, "largest", kind, *([str(cap)] if cap else [])],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout


@pytest.mark.parametrize("kind", sorted(KIND_CAPS))
def test_flight_and_profile_past_64_kib_decode_up_to_their_own_cap(kind, tmp_path):
    for cap in (MESSAGE_CAP + MESSAGE_CAP // 2, KIND_CAPS[kind]):
        payload = largest(kind, cap)
        assert MESSAGE_CAP < len(payload) <= cap
        f = tmp_path / f"{kind}-{cap}.cbor"
        f.write_bytes(payload)
        for args in ([f], ["-"]):
            p = run(*args, stdin=payload if args == ["-"] else None)
            assert p.returncode == 0, p.stderr.decode()
            (out,) = lines(p)
            assert out["kind"] == kind
        # The same payload as a record of a recording.
        rec = tmp_path / f"{kind}-{cap}.emrec"
        rec.write_bytes(recording(record(f"edgemon/v1/{DEVICE}/{kind}", payload, 10)))
        p = run(rec)
        assert p.returncode == 0, p.stderr.decode()
        (out,) = lines(p)
        assert "error" not in out and out["message"]["kind"] == kind


@pytest.mark.parametrize("kind", sorted(KIND_CAPS))
def test_flight_and_profile_past_their_cap_get_the_clear_error(kind, tmp_path):
    # A valid one, padded past its kind's cap: too large, whatever follows.
    payload = largest(kind) + b"\x00" * (KIND_CAPS[kind] + 1)
    f = tmp_path / f"{kind}.cbor"
    f.write_bytes(payload)
    p = run(f)
    assert p.returncode == 1
    assert "message larger than the schema allows" in p.stderr.decode()
    rec = tmp_path / f"{kind}.emrec"
    rec.write_bytes(recording(record(f"edgemon/v1/{DEVICE}/{kind}", payload, 10)))
    p = run(rec)
    assert p.returncode == 1
    (out,) = lines(p)
    assert out["error"] == "message larger than the schema allows"


def test_another_kind_past_64_kib_gets_the_clear_error(tmp_path):
    payload = vector("data_basic.cbor") + b"\x00" * MESSAGE_CAP
    f = tmp_path / "data.cbor"
    f.write_bytes(payload)
    p = run(f)
    assert p.returncode == 1
    assert "message larger than the schema allows" in p.stderr.decode()


@pytest.mark.parametrize("args", [["--bogus"], ["-x"], ["--json", "--diag"],
                                  ["a.cbor", "b.cbor"]])
def test_usage_errors_exit_2(args):
    p = run(*args)
    assert p.returncode == 2
    assert "--help" in p.stderr.decode()


def test_help_is_truthful():
    p = run("--help")
    assert p.returncode == 0
    out = p.stdout.decode()
    assert out.startswith("usage: edgemon-cli decode")
    for word in ("--json", "--diag", "EMREC", "exit status"):
        assert word in out


# ---- recordings -----------------------------------------------------------------------------

def birth_then_data():
    return recording(
        # Data before its birth: aliases only.
        record(f"edgemon/v1/{DEVICE}/data", vector("data_basic.cbor"), 10),
        record(f"edgemon/v1/{DEVICE}/birth", vector("birth_full.cbor"), 11, retained=True),
        record(f"edgemon/v1/{DEVICE}/data", vector("data_basic.cbor"), 12),
        # Another device with the same session never had a birth: aliases.
        record("edgemon/v1/other/data", vector("data_basic.cbor"), 13),
        # A different session of the same device: its birth does not apply.
        record(f"edgemon/v1/{DEVICE}/data", vector("data_alias_widths.cbor"), 14),
        record(f"edgemon/v1/{DEVICE}/state", vector("state_degraded.cbor"), 15),
    )


def check_birth_then_data(out):
    assert [o["recv_time_ns"] for o in out] == [10, 11, 12, 13, 14, 15]
    assert [o["topic"].rsplit("/", 1)[1] for o in out] == \
        ["data", "birth", "data", "data", "data", "state"]
    assert all("error" not in o for o in out)
    assert set(out[0]["message"]["values"]) == {str(a) for a in range(7)}
    assert out[1]["message"] == json.loads(
        (ROOT / "proto" / "vectors" / "birth_full.json").read_text())
    named = out[2]["message"]["values"]
    assert named == {"pmu.cycles": None, "pmu.instructions": None, "pmu.task_clock": 98765432,
                     "pmu.context_switches": 12, "pmu.ipc": 1.375, "mem.rss": 734003200,
                     "psi.cpu.some.avg10": 0.1}
    assert "0" in out[3]["message"]["values"]
    assert "pmu.cycles" not in json.dumps(out[4]["message"]["values"])
    assert out[5]["message"]["kind"] == "state"


def test_recording_names_values_after_the_birth(tmp_path):
    f = tmp_path / "rec.emrec"
    f.write_bytes(birth_then_data())
    p = run(f)
    assert p.returncode == 0, p.stderr.decode()
    check_birth_then_data(lines(p))


def test_recording_on_stdin(tmp_path):
    p = run("-", stdin=birth_then_data())
    assert p.returncode == 0, p.stderr.decode()
    check_birth_then_data(lines(p))


def test_recording_in_diag_mode(tmp_path):
    f = tmp_path / "rec.emrec"
    f.write_bytes(birth_then_data())
    p = run(f, "--diag")
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode().splitlines()
    assert len(out) == 6
    assert out[1].startswith('{"topic": "edgemon/v1/%s/birth", "recv_time_ns": 11, '
                             '"payload": {0: 1, 1: 0, ' % DEVICE)
    assert '"orin-07.lab:left"' in out[1]
    assert all(line.endswith("}") for line in out)


def test_invalid_record_prints_an_error_line_and_carries_on(tmp_path):
    bad = bytearray(vector("status_online.cbor"))
    bad[2] = 0x02
    f = tmp_path / "rec.emrec"
    f.write_bytes(recording(
        record(f"edgemon/v1/{DEVICE}/status", vector("status_online.cbor"), 1),
        record(f"edgemon/v1/{DEVICE}/status", bytes(bad), 2),
        record(f"edgemon/v1/{DEVICE}/status", b"\xff", 3),
        record(f"edgemon/v1/{DEVICE}/status", b"", 4, retained=True),
        record(f"edgemon/v1/{DEVICE}/status", vector("status_offline.cbor"), 5),
    ))
    p = run(f)
    assert p.returncode == 1
    out = lines(p)
    assert len(out) == 5
    assert out[0]["message"]["online"] is True
    assert out[1]["topic"] == f"edgemon/v1/{DEVICE}/status"
    assert out[1]["recv_time_ns"] == 2
    assert "version" in out[1]["error"] and out[1]["offset"] == 2
    assert "message" not in out[1]
    assert out[2]["offset"] == 0 and out[2]["error"]
    assert out[3]["message"] is None and "error" not in out[3]  # a retained clear
    assert out[4]["message"]["online"] is False

    p = run(f, "--diag")
    assert p.returncode == 1
    d = p.stdout.decode().splitlines()
    assert len(d) == 5
    assert '"payload": {0: 2, 1: 3, ' in d[1] and '"offset": 2}' in d[1]
    assert "\"payload\": h'ff', \"error\": " in d[2]
    assert d[3].endswith("\"payload\": h''}")


@pytest.mark.parametrize("damage", ["crc", "truncated"])
def test_corrupt_recording_prints_what_came_before_and_exits_4(tmp_path, damage):
    good = record(f"edgemon/v1/{DEVICE}/status", vector("status_online.cbor"), 1)
    second = bytearray(record(f"edgemon/v1/{DEVICE}/status", vector("status_offline.cbor"), 2))
    if damage == "crc":
        second[-1] ^= 0xFF
    else:
        second = second[:-5]
    data = recording(good, bytes(second))
    f = tmp_path / "rec.emrec"
    f.write_bytes(data)
    for p in (run(f), run("-", stdin=data)):
        assert p.returncode == 4
        out = lines(p)
        assert len(out) == 1 and out[0]["message"]["online"] is True
        offset = 8 + len(good)
        assert f"at byte {offset}" in p.stderr.decode(), p.stderr


def test_recording_of_another_version_exits_4(tmp_path):
    f = tmp_path / "rec.emrec"
    f.write_bytes(b"EMREC\x00\x02\x00")
    p = run(f)
    assert p.returncode == 4
    assert "version" in p.stderr.decode()
    p = run("-", stdin=b"EMREC\x00\x02\x00")
    assert p.returncode == 4


def test_empty_recording_prints_nothing(tmp_path):
    f = tmp_path / "rec.emrec"
    f.write_bytes(recording())
    p = run(f)
    assert p.returncode == 0 and p.stdout == b""


def test_closed_stdout_ends_quietly(tmp_path):
    # Many records into a pipe closed after the first line: exit 4, no message, no hang.
    data = recording(*[record(f"edgemon/v1/{DEVICE}/data", vector("data_largest.cbor"), i)
                       for i in range(200)])
    f = tmp_path / "rec.emrec"
    f.write_bytes(data)
    proc = subprocess.Popen([CLI, "decode", str(f)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 4
    assert err == b""
