"""Numeric arguments of every edgemon-cli command: one strict form, the same everywhere.

A number is plain decimal (5, 0.5), and a duration may end in a unit (ms, s, m, h). Hex,
octal-looking leading zeros, exponents, signs, spaces, inf/nan, trailing junk and values out
of range exit 2 with the option and the argument named. Accepted values are shown accepted by
the exit code of what comes after the arguments are checked: 3 for a broker that is not there,
4 for a recording that is not there.

Run through ctest (label integration), which sets EM_CLI.
"""

import os
import subprocess

import pytest

from conftest import free_port

CLI = os.environ.get("EM_CLI")

# (command, option, kind, what comes after a good value, extra arguments).
NO_BROKER = ["--broker", "mqtt://127.0.0.1:1"]
OPTIONS = [
    ("tail", "--duration", "duration", 3, NO_BROKER),
    ("tail", "--count", "count", 3, NO_BROKER),
    ("record", "--duration", "duration", 3, NO_BROKER + ["--out", "x.emrec"]),
    ("record", "--count", "count", 3, NO_BROKER + ["--out", "x.emrec"]),
    ("status", "--wait", "duration", 3, NO_BROKER),
    ("replay", "--rate", "number", 4, ["missing.emrec"]),
    ("replay", "--max-gap", "duration", 4, ["missing.emrec"]),
    ("compare", "--threshold", "number", 4, ["a.emrec", "b.emrec"]),
    ("compare", "--alpha", "number", 4, ["a.emrec", "b.emrec"]),
]
IDS = [f"{c}{o}" for c, o, *_ in OPTIONS]

# Refused by every numeric option, whatever its range.
NOT_NUMBERS = ["0x10", "0X1", "010", "00", "1e3", "1E-1", "-1", "-0", "+1", " 1", "1 ", "\t1",
               "1.5x", "1,5", "inf", "nan", "", ".5", "1.", ".", "1..2", "0x1p3", "١"]


def cli(*args, cwd=None):
    assert CLI, "EM_CLI must name the edgemon-cli binary (run through ctest)"
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=30,
                          cwd=cwd)


def refused(cmd, opt, value, extra, tmp_path):
    r = cli(cmd, opt, value, *extra, cwd=tmp_path)
    assert r.returncode == 2, (cmd, opt, value, r.stderr)
    assert f"edgemon-cli {cmd}: {opt}: '{value}' is " in r.stderr, r.stderr
    assert f"Try 'edgemon-cli {cmd} --help'" in r.stderr, r.stderr
    assert not (tmp_path / "x.emrec").exists()
    return r.stderr


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize("cmd,opt,kind,after,extra", OPTIONS, ids=IDS)
def test_a_number_not_in_plain_decimal_is_refused(cmd, opt, kind, after, extra, value, tmp_path):
    err = refused(cmd, opt, value, extra, tmp_path)
    assert "is not a" in err, err


@pytest.mark.parametrize("cmd,opt,kind,after,extra", OPTIONS, ids=IDS)
def test_overflow_and_out_of_range_are_refused(cmd, opt, kind, after, extra, tmp_path):
    for value in ["9" * 400, "18446744073709551617", "9007199254740993"]:
        err = refused(cmd, opt, value, extra, tmp_path)
        assert "out of range" in err, err


@pytest.mark.parametrize("cmd,opt,kind,after,extra", OPTIONS, ids=IDS)
def test_units_only_where_a_duration_is_wanted(cmd, opt, kind, after, extra, tmp_path):
    for value in ["2s", "500ms", "5m", "1h"]:
        if kind == "duration":
            r = cli(cmd, opt, value, *extra, cwd=tmp_path)
            assert r.returncode == after, (value, r.stderr)
        else:
            refused(cmd, opt, value, extra, tmp_path)
    for value in ["2 s", "2S", "2sec", "2us", "2d", "s", "ms"]:
        refused(cmd, opt, value, extra, tmp_path)


@pytest.mark.parametrize("cmd,opt,kind,after,extra", OPTIONS, ids=IDS)
def test_plain_decimals_in_range_are_accepted(cmd, opt, kind, after, extra, tmp_path):
    values = {"count": ["1", "10", "9007199254740992"],
              "duration": ["0.5", "1", "10", "3600"],
              "number": ["0.5", "1", "0.01"]}[kind]
    for value in values:
        r = cli(cmd, opt, value, *extra, cwd=tmp_path)
        assert r.returncode == after, (value, r.stderr)
        assert "is not a" not in r.stderr and "out of range" not in r.stderr, r.stderr


@pytest.mark.parametrize("cmd,opt,value", [
    ("tail", "--count", "0"), ("tail", "--count", "1.5"), ("tail", "--duration", "0"),
    ("tail", "--duration", "0ms"), ("tail", "--duration", "2778h"),
    ("status", "--wait", "3601"), ("status", "--wait", "61m"), ("compare", "--alpha", "0"),
    ("compare", "--alpha", "1.5"), ("compare", "--threshold", "1000001"),
])
def test_each_option_keeps_its_range(cmd, opt, value, tmp_path):
    extra = ["a.emrec", "b.emrec"] if cmd == "compare" else NO_BROKER
    refused(cmd, opt, value, extra, tmp_path)


def test_a_duration_in_milliseconds_is_not_read_as_seconds(stack):
    """--duration 500ms ends tail after half a second, not 500 s (bounded by the 30 s
    timeout of the run)."""
    broker = stack.broker()
    r = cli("tail", "--broker", f"mqtt://127.0.0.1:{broker.port}", "--duration", "500ms")
    assert r.returncode == 0, r.stderr


def test_hex_duration_from_the_probe_is_refused():
    r = cli("tail", "--duration", "0x10", "--broker", f"mqtt://127.0.0.1:{free_port()}")
    assert r.returncode == 2, r.stderr
    assert "--duration: '0x10' is not a duration" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["tail", "record", "status", "replay"])
def test_help_says_how_numbers_are_written(cmd):
    r = cli(cmd, "--help")
    assert r.returncode == 0
    assert "plain decimals" in r.stdout and "500ms" in r.stdout, r.stdout
