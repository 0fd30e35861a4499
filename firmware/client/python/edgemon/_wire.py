"""Span datagram v1 on the client side: the record layout and the stage-name rules (and the
kinds of the ring datagrams v2, which share the layout), and the model datagram v2 (512 bytes:
the model identity set_model sends).

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

# Model datagram v2 (WIRE.md "Model identity"): 512 bytes, version 2, kind 7. Header and texts
# ('<2sBBIIB3x64s32s', 112 bytes), 8 label slots of '<16s32s', 16 reserved zero bytes.
KIND_MODEL = 7
MODEL_HEAD_STRUCT = struct.Struct("<2sBBIIB3x64s32s")
MODEL_LABEL_STRUCT = struct.Struct("<16s32s")
MODEL_BYTES = 512
MODEL_LABELS_AT = 112
MODEL_MAX_LABELS = 8
assert MODEL_LABELS_AT == MODEL_HEAD_STRUCT.size
assert MODEL_LABELS_AT + MODEL_MAX_LABELS * MODEL_LABEL_STRUCT.size + 16 == MODEL_BYTES

# The schema's rules (em_proto_model_check): name 1..63, version and label values 1..31
# printable ASCII bytes; label keys Prometheus label names of 1..15 bytes, not "__...".
_NAME_RE = re.compile(rb"[\x20-\x7e]{1,63}")
_SHORT_TEXT_RE = re.compile(rb"[\x20-\x7e]{1,31}")
_LABEL_KEY_RE = re.compile(rb"(?!__)[A-Za-z_][A-Za-z0-9_]{0,14}")


def _ascii(value, pattern):
    """value (str or bytes) as bytes when it matches pattern in full, else None."""
    if isinstance(value, str):
        try:
            value = value.encode("ascii")
        except UnicodeEncodeError:
            return None
    elif not isinstance(value, bytes):
        return None
    return value if pattern.fullmatch(value) is not None else None


def check_model(name, version, labels):
    """Validates a set_model call with the schema's rules; never raises.

    Returns (name, version, pairs, bad, over): name and version as bytes (None when invalid:
    the whole call is then dropped), pairs the valid labels as (key, value) bytes sorted by key
    (the first 8 valid ones in the order given), bad the count of invalid labels and over the
    count of valid labels past the 8th.
    """
    name_b = _ascii(name, _NAME_RE)
    version_b = _ascii(version, _SHORT_TEXT_RE)
    pairs, bad, over = [], 0, 0
    for key, value in labels.items():
        key_b = _ascii(key, _LABEL_KEY_RE)
        value_b = _ascii(value, _SHORT_TEXT_RE)
        if key_b is None or value_b is None:
            bad += 1
        elif len(pairs) >= MODEL_MAX_LABELS:
            over += 1
        else:
            pairs.append((key_b, value_b))
    pairs.sort()
    return name_b, version_b, pairs, bad, over


def pack_model(pid, generation, name_b, version_b, pairs):
    """The 512-byte model datagram of a checked identity (check_model's output)."""
    buf = bytearray(MODEL_BYTES)
    MODEL_HEAD_STRUCT.pack_into(buf, 0, MAGIC, RING_VERSION, KIND_MODEL, pid & 0xFFFFFFFF,
                                generation & 0xFFFFFFFF, len(pairs), name_b, version_b)
    for i, (key_b, value_b) in enumerate(pairs):
        MODEL_LABEL_STRUCT.pack_into(buf, MODEL_LABELS_AT + i * MODEL_LABEL_STRUCT.size, key_b,
                                     value_b)
    return bytes(buf)


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
