"""edgemon_proto - reads edgemon v1 telemetry (proto/edgemon.cddl) in Python.

An independent reading of the schema, written from the CDDL and not from the C code: the
interop tests hold the C codec against it, and the demo and test tools use it to print what
the agent publishes. Needs Debian's python3-cbor2 for the CBOR layer; nothing else.

    msg = edgemon_proto.decode(payload)    # -> dict with field names, as the .json vectors
    names = edgemon_proto.values_by_name(msg, birth)   # data values keyed by metric name
"""

import cbor2

LEVELS = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"]
KINDS = ["birth", "data", "state", "status", "cmd"]
METRIC_KINDS = ["gauge", "counter", "delta"]

COMMON = {0: "v", 1: "kind", 2: "time_ns", 3: "session"}
BIRTH = {4: "device", 5: "agent_version", 6: "board", 7: "period_ns", 8: "metrics", 9: "budgets"}
METRIC = {0: "alias", 1: "name", 2: "unit", 3: "kind", 4: "absent_reason"}
BUDGET = {0: "id", 1: "rule", 2: "level", 3: "bound", 4: "stage", 5: "window_ns"}
DATA = {4: "seq", 5: "window_ns", 6: "values", 7: "stages", 8: "level", 9: "historical"}
STAGE = {0: "name", 1: "count", 2: "sum_ns", 3: "min_ns", 4: "max_ns", 5: "p50_ns",
         6: "p90_ns", 7: "p99_ns", 8: "p999_ns", 9: "scale", 10: "zero_count", 11: "buckets"}
STATE = {4: "level", 5: "prev_level", 6: "mono_ns", 7: "rule", 8: "stage", 9: "value",
         10: "bound", 11: "reason", 12: "historical"}
STATUS = {4: "online"}
CMD = {4: "command"}
PER_KIND = {"birth": BIRTH, "data": DATA, "state": STATE, "status": STATUS, "cmd": CMD}
COMMANDS = {1: "rebirth"}


class DecodeError(ValueError):
    """The payload is not a v1 message this reader understands."""


def _named(raw, keys):
    """Renames a CBOR map's integer keys; unknown keys are dropped as v1 readers must."""
    if not isinstance(raw, dict) or not all(isinstance(k, int) and k >= 0 for k in raw):
        raise DecodeError(f"expected a map with unsigned integer keys, got {raw!r:.80}")
    return {keys[k]: v for k, v in raw.items() if k in keys}


def _stage(raw):
    s = _named(raw, STAGE)
    if s.get("count", 0) > 0:
        s.setdefault("zero_count", 0)
        flat, buckets, index = s["buckets"], [], None
        if len(flat) % 2:
            raise DecodeError("bucket array of odd length")
        for i in range(0, len(flat), 2):
            index = flat[i] if i == 0 else index + flat[i]
            buckets.append([index, flat[i + 1]])
        s["buckets"] = buckets
    return s


def decode(payload):
    """CBOR bytes -> a dict with field names (levels, kinds and commands by name)."""
    try:
        raw = cbor2.loads(payload)
    except Exception as e:  # cbor2 raises several types for bad input
        raise DecodeError(f"not CBOR: {e}") from e
    if not isinstance(raw, dict) or raw.get(0) != 1 or raw.get(1) not in range(len(KINDS)):
        raise DecodeError("not an edgemon v1 message")
    kind = KINDS[raw[1]]
    msg = _named(raw, {**COMMON, **PER_KIND[kind]})
    msg["kind"] = kind
    if kind == "birth":
        msg["metrics"] = [_named(m, METRIC) for m in msg["metrics"]]
        for m in msg["metrics"]:
            m["kind"] = METRIC_KINDS[m["kind"]]
        msg["budgets"] = [_named(b, BUDGET) for b in msg["budgets"]]
        for b in msg["budgets"]:
            b["level"] = LEVELS[b["level"]]
    elif kind == "data":
        msg["values"] = {str(k): v for k, v in sorted(msg["values"].items())}
        msg["stages"] = [_stage(s) for s in msg["stages"]]
        if "level" in msg:
            msg["level"] = LEVELS[msg["level"]]
    elif kind == "state":
        msg["level"] = LEVELS[msg["level"]]
        msg["prev_level"] = LEVELS[msg["prev_level"]]
    elif kind == "cmd":
        msg["command"] = COMMANDS.get(msg["command"], "unknown")
    return msg


def values_by_name(data, birth):
    """A data message's values keyed by metric name, using the birth's dictionary."""
    names = {str(m["alias"]): m["name"] for m in birth["metrics"]}
    return {names.get(alias, f"alias.{alias}"): v for alias, v in data["values"].items()}


def encode_rebirth(time_ns):
    """The cmd message a host sends on .../cmd/rebirth."""
    return cbor2.dumps({0: 1, 1: 4, 2: time_ns, 4: 1})
