"""The Python client against what whoever can write the runtime directory may put where the
agent's pages should be (firmware/client/python/edgemon/_page.py).

A FIFO, a symbolic link (to a FIFO, or to a valid page), a directory, a socket and, when the
test may make one, a character device stand in place of the state page, the deadline page and
the profile request page. A plain open() of a FIFO waits for a writer, so each client runs in
a child interpreter given PROMPT_S: one still running then is killed and the test fails
("blocked") instead of hanging the run. Checked: level() is None, record() goes on as with no
page (a datagram, no rings, no profile window), the refusal is counted with its reason in the
stats and warned about once however often the page is looked at, and a valid page renamed
over the refused file is read as usual.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/client/test_python_pages.py
"""

import json
import os
import socket
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[2] / "firmware" / "client" / "python"
PROMPT_S = 10  # a client that has not answered by then blocked (a page check takes ~0 ms)

# What can stand at a page's path, and what the client must say it found.
KINDS = {
    "fifo": "a FIFO, not a regular file",
    "link_to_fifo": "a symbolic link, not a regular file",
    "link_to_page": "a symbolic link, not a regular file",
    "directory": "a directory, not a regular file",
    "socket": "a socket, not a regular file",
    "char_device": "a character device, not a regular file",
}
PAGES = ("state", "deadlines", "profile")

# Valid pages, packed from proto/WIRE.md independently of the client.
STATE_PAGE = (struct.pack("<4sHHII", b"EMST", 1, 256, 2, 777)
              + struct.pack("<BBHIQQdd32s32s136s", 2, 0, 0, 1, 1, 1, 1.0, 1.0, b"", b"", b""))
DEADLINE_PAGE = struct.pack("<4sHHIII44x", b"EMDL", 1, 0, 2, 777, 64) + bytes(2624 - 64)
PROFILE_PAGE = struct.pack("<4sHHIIQQ32s", b"EMPR", 1, 64, 1, 99, 0, 0, b"")
VALID = {"state": STATE_PAGE, "deadlines": DEADLINE_PAGE, "profile": PROFILE_PAGE}

# The child: a client with its pages in `dir`, looked at LOOKS times (the once-a-second
# pacing forced), then one JSON line of what it saw.
CHILD = r"""
import json, sys, time, warnings
sys.path.insert(0, sys.argv[1])
import edgemon
d = sys.argv[2]
looks = int(sys.argv[3])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    c = edgemon.Client(socket_path=d + "/spans.sock", state_path=d + "/state")
    levels, records = [], []
    for _ in range(looks):
        c._page._next_check_ns = 0
        c._next_check_ns = 0
        levels.append(c.level())
        records.append(c.record("infer", time.monotonic_ns() - 1000, 1000))
    out = {"levels": levels, "stats": c.stats(), "state": c._page.stats(),
           "deadline_refused": c._dpage.refused, "rings_on": c._rings_on,
           "windows": c._pyprof.counts["windows"],
           "warnings": [str(w.message) for w in caught if w.category is RuntimeWarning]}
    c.close()
print(json.dumps(out))
"""


def run_client(runtime_dir, looks=3):
    """What a client with its pages in runtime_dir saw; fails when it blocked."""
    env = dict(os.environ)
    for name in ("EDGEMON_SOCKET", "EDGEMON_STATE_PAGE", "EDGEMON_DEADLINE_PAGE",
                 "EDGEMON_PROFILE_PAGE", "EDGEMON_PYTHON_STACKS"):
        env.pop(name, None)
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(CLIENT_DIR), str(runtime_dir),
                               str(looks)], env=env, capture_output=True, timeout=PROMPT_S)
    except subprocess.TimeoutExpired:  # run() has killed it
        pytest.fail("the client blocked on a page for over %d s" % PROMPT_S)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def plant(runtime_dir, name, kind, holders):
    """Puts a `kind` at runtime_dir/name; skips when the test may not make one."""
    path = runtime_dir / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link_to_fifo":
        os.mkfifo(runtime_dir / "elsewhere.fifo")
        os.symlink(runtime_dir / "elsewhere.fifo", path)
    elif kind == "link_to_page":
        (runtime_dir / "elsewhere.page").write_bytes(VALID[name])
        os.symlink(runtime_dir / "elsewhere.page", path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(path))
        holders.append(sock)
    elif kind == "char_device":
        try:  # /dev/null's numbers: it would not block, but it is no page
            os.mknod(path, 0o644 | 0o020000, os.makedev(1, 3))
        except (PermissionError, AttributeError):
            pytest.skip("cannot make a device node here")
    return str(path)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("page", PAGES)
def test_a_page_that_is_no_regular_file_is_absent_and_never_blocks(tmp_path, page, kind):
    holders = []
    path = plant(tmp_path, page, kind, holders)
    try:
        seen = run_client(tmp_path)
    finally:
        for sock in holders:
            sock.close()
    assert seen["levels"] == [None] * 3
    assert seen["stats"]["refused_pages"] == {path: KINDS[kind]}
    # One warning for three looks, naming the page and what stands there.
    assert len(seen["warnings"]) == 1, seen["warnings"]
    assert path in seen["warnings"][0] and KINDS[kind] in seen["warnings"][0]
    # As with no page: spans go as datagrams (nobody listens: dropped, no_agent).
    assert seen["stats"]["dropped"]["no_agent"] == 3
    assert not seen["rings_on"] and seen["windows"] == 0
    if page == "state":
        assert seen["state"]["refused"] == 3 and seen["state"]["absent"] == 0
        assert seen["state"]["refused_reason"] == KINDS[kind]
        assert seen["state"]["opens"] == 0
    else:
        assert seen["state"]["absent"] == 3 and seen["state"]["refused"] == 0
    if page == "deadlines":
        assert seen["deadline_refused"] == 3
    else:
        assert seen["deadline_refused"] == 0


def test_every_page_a_fifo_at_once(tmp_path):
    paths = [plant(tmp_path, page, "fifo", []) for page in PAGES]
    seen = run_client(tmp_path, looks=5)
    assert seen["levels"] == [None] * 5
    assert seen["stats"]["refused_pages"] == {p: KINDS["fifo"] for p in paths}
    assert len(seen["warnings"]) == 3


def test_a_valid_page_renamed_over_the_refused_one_is_read(tmp_path):
    for page in PAGES:
        plant(tmp_path, page, "fifo", [])
    run_client(tmp_path, looks=1)  # refused, promptly
    for page in PAGES:  # the agent renames its pages into place
        tmp = tmp_path / (page + ".tmp")
        tmp.write_bytes(VALID[page])
        os.rename(tmp, tmp_path / page)
    seen = run_client(tmp_path, looks=1)
    assert seen["levels"] == ["DEGRADED"]
    assert "refused_pages" not in seen["stats"] and seen["warnings"] == []
    assert seen["rings_on"] and seen["deadline_refused"] == 0
    assert seen["state"]["opens"] == 1 and seen["state"]["refused_reason"] is None


def test_the_reason_goes_when_the_page_does(tmp_path):
    """In one process: refused (a FIFO), then a valid page, then nothing there."""
    sys.path.insert(0, str(CLIENT_DIR))
    from edgemon import _page

    path = tmp_path / "state"
    os.mkfifo(path)
    with pytest.warns(RuntimeWarning, match="a FIFO"):
        with pytest.raises(_page.PageRefused):
            _page.open_page(path, "state page")
    assert _page.refusal(path) == KINDS["fifo"]
    os.unlink(path)
    path.write_bytes(STATE_PAGE)
    fd, st = _page.open_page(path, "state page")
    os.close(fd)
    assert st.st_size == 256 and _page.refusal(path) is None
    os.unlink(path)
    os.mkfifo(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(_page.PageRefused):
            _page.open_page(path, "state page")
    assert caught == []  # warned about once per path and reason
    os.unlink(path)
    with pytest.raises(FileNotFoundError):
        _page.open_page(path, "state page")
    assert _page.refusal(path) is None
