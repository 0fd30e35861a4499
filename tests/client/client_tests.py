"""What the Python client's tests share (imported before edgemon by each of them).

On import it puts the package in firmware/client/python on sys.path, so the tests run it
without installation. SocketPeer is the bound socket a test's peer on the client's socket (a
receiver, a fake agent) starts from; socket_peer() makes the fixture of such a peer: bound at
tmp_path/spans.sock, closed when the test ends.
Python 3.8 like the client: the suite also runs on the oldest python3 the client supports.
"""

import os
import socket
import sys
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[2] / "firmware" / "client" / "python"
if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))


class SocketPeer:
    """A bound AF_UNIX SOCK_DGRAM socket at `path` (a str in .path) standing in for the agent's
    span socket; its receives time out after `timeout` s."""

    def __init__(self, path, timeout=5.0):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(timeout)

    def close(self, unlink=True):
        """Closes the socket and, with unlink, removes its file."""
        self.sock.close()
        if unlink and os.path.exists(self.path):
            os.unlink(self.path)


def socket_peer(make):
    """A pytest fixture yielding make(tmp_path / "spans.sock") and closing it afterwards; its
    name is the module attribute it is assigned to."""
    @pytest.fixture
    def fixture(tmp_path):
        peer = make(tmp_path / "spans.sock")
        yield peer
        peer.close()
    return fixture
