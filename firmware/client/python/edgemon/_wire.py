"""Span datagram v1 on the client side: the record layout and the stage-name rules (and the
kinds of the ring datagrams v2, which share the layout).

proto/WIRE.md is the normative description; this module is the part of it a sender needs.
One datagram is 64 bytes, packed with one precompiled struct.Struct:

    offset  size  field        value here
         0     2  magic        b"EM"
         2     1  version      1
         3     1  kind         1 span, 2 heartbeat
         4     4  pid          os.getpid() of the sender
         8     8  frame_id     the frame the span belongs to (0: none)
        16     8  start_ns     time.monotonic_ns() (CLOCK_MONOTONIC) at the start
        24     8  duration_ns  how long it took (0 for a heartbeat)
        32    32  stage        1..31 bytes of [A-Za-z0-9_.:-], NUL-padded

struct pads a "32s" field with NUL bytes (exactly the stage field's padding) but silently
truncates a longer value, so names are validated here before they are ever packed.

Stage names are validated and encoded once and then cached: the hot path does one dict
lookup. The cache is bounded so a program that invents names in a loop cannot grow it without
limit; past the bound, names are validated on every use (correct, only slower).
"""

import os
import re
import struct
import sys
import warnings

MAGIC = b"EM"
VERSION = 1
KIND_SPAN = 1
KIND_HEARTBEAT = 2

# Ring datagrams v2 (WIRE.md "Registration"): the same 64-byte layout, version 2.
RING_VERSION = 2
KIND_REGISTER = 5  # client -> agent, start = the ring's head, the memfd in SCM_RIGHTS
KIND_HARD_MISS = 6  # client -> agent, a ring span over its stage's hard deadline
KIND_RING_ACK = 17  # agent -> client, status at offset 16 as a signed i64

# The whole datagram, WIRE.md's format string. calcsize == 64.
SPAN_STRUCT = struct.Struct("<2sBBIQQQ32s")
assert SPAN_STRUCT.size == 64

STAGE_MAX_BYTES = 31
_STAGE_RE = re.compile(rb"[A-Za-z0-9_.:-]{1,31}")

# stage (str or bytes) -> its encoded bytes, or None when the name is invalid.
STAGE_CACHE = {}
_STAGE_CACHE_MAX = 4096
_warned_names = set()
_WARNED_MAX = 256


def stage_bytes(stage):
    """Returns the wire bytes of a stage name, or None when it is not a valid stage name.

    Warns (warnings.warn, RuntimeWarning) the first time an invalid name is seen; never
    raises. The result is cached (up to a bound) so the next lookup is one dict access:
    callers on the hot path try STAGE_CACHE[stage] first and call this on a miss.
    """
    if isinstance(stage, str):
        try:
            raw = stage.encode("ascii")
        except UnicodeEncodeError:
            raw = None
    elif isinstance(stage, bytes):
        raw = stage
    else:
        raw = None
    if raw is not None and _STAGE_RE.fullmatch(raw) is None:
        raw = None
    try:
        if len(STAGE_CACHE) < _STAGE_CACHE_MAX:
            STAGE_CACHE[stage] = raw
    except TypeError:  # unhashable (a list, a dict): never cached, always invalid
        pass
    if raw is None:
        _warn_invalid(stage)
    return raw


def _warn_invalid(stage):
    key = repr(stage)
    if key in _warned_names or len(_warned_names) >= _WARNED_MAX:
        return
    _warned_names.add(key)
    warn_at_caller(
        "edgemon: stage name %s is not 1..31 bytes of [A-Za-z0-9_.:-]; its spans are "
        "dropped (counted as invalid_stage)" % key)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def warn_at_caller(message):
    """warnings.warn(RuntimeWarning) attributed to the first frame outside this package, so
    the warning names the user's line whichever API function led here."""
    level = 2  # stacklevel 2 is the frame that called warn_at_caller
    try:
        frame = sys._getframe(1)
        while frame is not None and os.path.dirname(
                os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
            frame = frame.f_back
            level += 1
    except (AttributeError, ValueError):  # no frame introspection in this interpreter
        level = 3
    warnings.warn(message, RuntimeWarning, stacklevel=level)
