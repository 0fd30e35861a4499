"""`edgemon-agent --detect` over the board fixture trees (tests/fixtures/boards/<name>/).

Runs the real binary with --root pointing at each recorded tree and checks that it names the
tree's own profile, its description and a reason, and exits 0; an empty root falls back to a
generic profile; an unreadable profile directory exits 1 with a message naming it.
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "boards"
BOARDS = ROOT / "boards"
AGENT = os.environ.get("EM_AGENT")

EXPECTED = {
    "jetson-agx-orin": "model 'NVIDIA Jetson AGX Orin Developer Kit' contains 'Jetson AGX Orin'",
    "jetson-orin-nano": "contains 'Jetson Orin Nano'",
    "jetson-agx-xavier": "contains 'Jetson-AGX'",
    "jetson-xavier-nx": "contains 'Jetson Xavier NX'",
    "jetson-nano": "contains 'Jetson Nano'",
    "jetson-tx2": "CPU part 0x4e:0x003 x2",
    "raspberry-pi-5": "contains 'Raspberry Pi 5'",
    "generic-arm64": "generic profile for arch aarch64",
    "generic-x86_64": "generic profile for arch x86_64",
}


def detect(*args, env=None):
    assert AGENT, "EM_AGENT must name the edgemon-agent binary (run through ctest)"
    return subprocess.run([AGENT, "--detect", *args], capture_output=True, text=True,
                          timeout=30, env=env)


def fields(stdout):
    out = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(": ")
        out.setdefault(key, []).append(value)
    return out


def test_every_board_has_a_fixture_and_a_profile():
    assert sorted(p.stem for p in BOARDS.glob("*.ini")) == sorted(EXPECTED)
    assert sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) == sorted(EXPECTED)


@pytest.mark.parametrize("board", sorted(EXPECTED))
def test_detect_names_the_fixture_board_and_why(board):
    r = detect("--root", str(FIXTURES / board), "--boards", str(BOARDS))
    assert r.returncode == 0, r.stderr
    f = fields(r.stdout)
    assert f["board"] == [board]
    assert f["description"][0]
    assert any(EXPECTED[board] in reason for reason in f["reason"]), r.stdout
    assert "note" not in f, r.stdout


def test_detect_default_boards_dir_finds_the_source_tree(tmp_path):
    """No --boards and no EDGEMON_BOARDS_DIR: a build tree falls back to the source boards/."""
    env = {k: v for k, v in os.environ.items() if k != "EDGEMON_BOARDS_DIR"}
    r = detect("--root", str(FIXTURES / "raspberry-pi-5"), env=env)
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout)["board"] == ["raspberry-pi-5"]
    # The environment variable wins over the built-in default.
    env["EDGEMON_BOARDS_DIR"] = str(tmp_path / "none")
    r = detect("--root", str(FIXTURES / "raspberry-pi-5"), env=env)
    assert r.returncode == 1
    assert str(tmp_path / "none") in r.stderr


def test_detect_empty_root_falls_back_to_generic(tmp_path):
    r = detect("--root", str(tmp_path), "--boards", str(BOARDS))
    assert r.returncode == 0, r.stderr
    f = fields(r.stdout)
    assert f["board"][0] in ("generic-x86_64", "generic-arm64")
    assert any("uname" in reason for reason in f["reason"])


def test_detect_unreadable_or_empty_profile_dir_exits_1(tmp_path):
    r = detect("--root", str(FIXTURES / "jetson-nano"), "--boards", str(tmp_path / "missing"))
    assert r.returncode == 1
    assert "cannot read the board profiles" in r.stderr and "missing" in r.stderr
    r = detect("--root", str(FIXTURES / "jetson-nano"), "--boards", str(tmp_path))
    assert r.returncode == 1
    assert str(tmp_path) in r.stderr


def test_unknown_board_name_in_the_config_stops_the_start(tmp_path):
    conf = tmp_path / "agent.ini"
    conf.write_text("[agent]\nboard = jetson-thor\nruntime_dir = %s\n[target]\npid = 1\n"
                    % (tmp_path / "run"))
    r = subprocess.run([AGENT, "--config", str(conf), "--boards", str(BOARDS)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "board 'jetson-thor' has no profile" in r.stderr
