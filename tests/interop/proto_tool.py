"""The C reader as the interop tests run it: em-proto-tool decode (EM_PROTO_TOOL, which ctest
sets) on a payload, its exit status and JSON answer, and the check that a payload one rule
breaks is refused by both readers, the C one with that rule's error at an offset inside it.
"""

import json
import os
import subprocess

import pytest

TOOL = os.environ.get("EM_PROTO_TOOL")

needs_tool = pytest.mark.skipif(not TOOL, reason="EM_PROTO_TOOL not set (run through ctest)")


def c_decode(payload):
    """em-proto-tool decode on payload: (0, the message's JSON) or (1, the error's JSON)."""
    r = subprocess.run([TOOL, "decode"], input=payload, capture_output=True, timeout=30)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def both_refuse(payload, py_decode, py_error, error):
    """py_decode raises py_error on payload, and the C reader refuses it with `error` at an
    offset inside the payload."""
    with pytest.raises(py_error):
        py_decode(payload)
    rc, got = c_decode(payload)
    assert rc == 1, got
    assert got["error"] == error, got
    assert 0 <= got["offset"] < len(payload)
