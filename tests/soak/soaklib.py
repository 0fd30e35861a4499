"""What the soak and chaos runs share: a free loopback port, a bounded wait and the end of a
run (its verdict printed, its work directory removed after a pass)."""

import shutil
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


def conclude(work, keep, failed, passed):
    """Ends a run: prints `failed` (the failure report, empty when the run passed) and returns 1,
    keeping the work directory for its logs; or prints `passed`, removes work unless `keep`,
    and returns 0."""
    if failed:
        print(failed)
        return 1
    print(passed)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0
