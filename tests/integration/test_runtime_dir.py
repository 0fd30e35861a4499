"""The real agent against what others may put in its runtime directory, with a real mosquitto.

Before the agent starts, FIFOs stand where its state page, deadline page and their temporary
files go, and where it writes the profile request page's temporary file (profile.tmp). The
agent must start, rename regular pages over the FIFOs, and answer cmd/profile: opening a FIFO
for writing would block its loop until a reader came, so a profile published proves the
window's page was written without blocking. Then a symbolic link to a file outside stands at
profile.tmp: the next window's page must not be written through it (the file keeps its bytes)
and the page must be a regular file again.
"""

import os
import stat
import struct
import threading
import time
import uuid

import cbor2
import paho.mqtt.client as mqtt

from conftest import wait_for

PROFILE = "[profile]\nhz = 99\nseconds = 1\nmin_gap_seconds = 0\nunwind = fp\n"
PAGE = struct.Struct("<4sHHIIQQ32s")  # WIRE.md "Profile request page v1"
PLANTED = ("state", "state.tmp", "deadlines", "deadlines.tmp", "profile.tmp")


class Profiles:
    """cmd/profile out, every payload on edgemon/v1/<device>/profile in."""

    def __init__(self, port, device):
        self.count = 0
        self.lock = threading.Lock()
        self.device = device
        self.client = mqtt.Client(client_id=f"it-rundir-{uuid.uuid4().hex[:8]}")
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.subscribe(f"edgemon/v1/{device}/profile", qos=1)
        self.client.loop_start()

    def _on_message(self, client, userdata, m):
        with self.lock:
            self.count += 1

    def command(self):
        cmd = {0: 1, 1: 4, 2: time.time_ns(), 4: 3, 5: 1}
        self.client.publish(f"edgemon/v1/{self.device}/cmd/profile", cbor2.dumps(cmd),
                            qos=1).wait_for_publish()

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def regular_page(path, size):
    """True when path is a regular file (not a link) of `size` bytes."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size


def test_fifos_and_links_in_the_runtime_dir_never_block_or_redirect_the_agent(stack):
    run = stack.tmp / "run"
    run.mkdir()
    for name in PLANTED:
        os.mkfifo(run / name)
    broker, target, agent, sub = stack.watching(extra=PROFILE)
    sub.next("birth", timeout=10)
    wait_for(lambda: "attached" in agent.log_text(), 10, "the agent to attach")
    # The agent's own pages replaced the FIFOs, and their temporary files are gone.
    assert regular_page(run / "state", 256) and regular_page(run / "deadlines", 2624)
    assert not os.path.lexists(run / "state.tmp") and not os.path.lexists(run / "deadlines.tmp")
    assert stat.S_ISFIFO(os.lstat(run / "profile.tmp").st_mode)  # untouched until a window

    profiles = Profiles(broker.port, agent.device)
    try:
        profiles.command()
        wait_for(lambda: profiles.count >= 1, 15, "a profile past a FIFO at profile.tmp")
        assert regular_page(run / "profile", PAGE.size)
        assert (run / "profile").read_bytes()[:4] == b"EMPR"
        assert not os.path.lexists(run / "profile.tmp")

        outside = stack.tmp / "not-the-agents"
        outside.write_bytes(b"precious\n")
        os.symlink(outside, run / "profile.tmp")
        profiles.command()
        wait_for(lambda: profiles.count >= 2, 15, "a profile past a link at profile.tmp")
        assert outside.read_bytes() == b"precious\n"
        assert regular_page(run / "profile", PAGE.size)
        sub.next("data", timeout=5)  # the loop goes on
        assert agent.proc.poll() is None
    finally:
        profiles.close()
