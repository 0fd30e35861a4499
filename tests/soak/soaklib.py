"""What the soak and chaos runs share: a free loopback port and a bounded wait."""

import socket
import time


def free_port():
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, what, interval=0.05):
    """Polls pred() until it returns something truthy and returns that; raises TimeoutError
    naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
