"""edgemon_proto - reads edgemon v1 telemetry (proto/edgemon.cddl) in Python.

An independent reading of the schema, written from the CDDL and not from the C code: the
interop tests hold the C codec against it, and the demo and test tools use it to print what
the agent publishes. Needs Debian's python3-cbor2 for the CBOR layer; nothing else.

    msg = edgemon_proto.decode(payload)    # -> dict with field names, as the .json vectors
    names = edgemon_proto.values_by_name(msg, birth)   # data values keyed by metric name
    rec = edgemon_proto.decode_flight(payload)   # a flight recording with absolute figures
    prof = edgemon_proto.decode_profile(payload)  # a stack profile, as em_profile_to_json

A flight recording (kind 5) is checked against every rule its CDDL section states (names,
indices within their tables, times ascending, totals within uint64, limits) and raises
DecodeError on the first it breaks; so is a stack profile (kind 6) against its section's
rules P1-P5. A breach's verdict (state key 15, flight key 16) is checked against its rules
V1-V4 and comes out as the C printer's JSON names it.
"""

import math
import re

import cbor2

LEVELS = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"]
KINDS = ["birth", "data", "state", "status", "cmd", "flight", "profile"]
METRIC_KINDS = ["gauge", "counter", "delta"]

COMMON = {0: "v", 1: "kind", 2: "time_ns", 3: "session"}
BIRTH = {4: "device", 5: "agent_version", 6: "board", 7: "period_ns", 8: "metrics", 9: "budgets",
         10: "flight_recorder", 11: "model", 12: "profiler"}
PROFILER = {0: "hz", 1: "seconds", 2: "max_seconds", 3: "min_gap_seconds"}
RECORDER = {0: "pre_ns", 1: "post_ns", 2: "ticks", 3: "spans", 4: "bytes"}
METRIC = {0: "alias", 1: "name", 2: "unit", 3: "kind", 4: "absent_reason"}
BUDGET = {0: "id", 1: "rule", 2: "level", 3: "bound", 4: "stage", 5: "window_ns"}
DATA = {4: "seq", 5: "window_ns", 6: "values", 7: "stages", 8: "level", 9: "historical",
        10: "model"}
STAGE = {0: "name", 1: "count", 2: "sum_ns", 3: "min_ns", 4: "max_ns", 5: "p50_ns",
         6: "p90_ns", 7: "p99_ns", 8: "p999_ns", 9: "scale", 10: "zero_count", 11: "buckets"}
STATE = {4: "level", 5: "prev_level", 6: "mono_ns", 7: "rule", 8: "stage", 9: "value",
         10: "bound", 11: "reason", 12: "historical", 13: "model", 14: "model_change",
         15: "verdict"}
MODEL = {0: "name", 1: "version", 2: "labels"}
STATUS = {4: "online"}
CMD = {4: "command", 5: "seconds"}
FLIGHT = {4: "number", 5: "trigger", 6: "trigger_mono_ns", 7: "pre_ns", 8: "post_ns",
          9: "period_ns", 10: "stages", 11: "columns", 12: "ticks", 13: "spans", 14: "truncated",
          15: "historical", 16: "verdict"}
TRIGGER = {0: "cause", 1: "level", 2: "prev_level", 3: "rule", 4: "stage", 5: "value", 6: "bound",
           7: "reason"}
TRUNCATION = {0: "spans_cut", 1: "ticks_cut", 2: "spans_overwritten"}
CAUSES = ["escalation", "command"]
VERDICT = {0: "stage", 1: "statistic", 2: "baseline_ns", 3: "breach_ns", 4: "nominal_windows",
           5: "causes"}
VERDICT_CAUSE = {0: "cause", 1: "share", 2: "evidence", 3: "processes", 4: "functions"}
VERDICT_CAUSES = ["cpu_contention", "cpu_throttling", "frequency_cap", "memory_pressure", "io",
                  "waiting", "more_work", "unexplained"]
VERDICT_MAX_CAUSES, VERDICT_MAX_EVIDENCE = 8, 16
VERDICT_MAX_PROCESSES, VERDICT_MAX_FUNCTIONS = 8, 8
PROFILE = {4: "number", 5: "trigger", 6: "start_mono_ns", 7: "duration_ns", 8: "hz", 9: "clock",
           10: "samples", 11: "lost", 12: "stages", 13: "frames", 14: "stacks", 15: "notes",
           16: "truncated", 17: "historical"}
PROFILE_TRUNCATION = {0: "stacks_cut", 1: "samples_cut"}
FRAME_KINDS = ["native", "kernel", "python", "unknown"]
CLOCKS = ("cpu-clock", "task-clock")
PER_KIND = {"birth": BIRTH, "data": DATA, "state": STATE, "status": STATUS, "cmd": CMD,
            "flight": FLIGHT, "profile": PROFILE}
COMMANDS = {1: "rebirth", 2: "flight", 3: "profile"}

# The flight section's limits and string classes (proto/edgemon.cddl).
FLIGHT_MAX_BYTES = 262144
FLIGHT_MAX_STAGES, FLIGHT_MAX_COLUMNS = 64, 256
FLIGHT_MAX_TICKS, FLIGHT_MAX_SPANS = 4096, 65536
# The profile section's.
PROFILE_MAX_BYTES = 262144
PROFILE_MAX_FRAMES, PROFILE_MAX_STACKS, PROFILE_MAX_DEPTH = 16384, 8192, 256
PROFILE_MAX_STAGES, PROFILE_MAX_NOTES = 64, 16
U64 = 1 << 64
STAGE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,31}")
NAME = re.compile(r"[ -~]{1,63}")
UNIT = re.compile(r"[ -~]{1,15}")
MODEL_VERSION = re.compile(r"[ -~]{1,31}")
LABEL_KEY = re.compile(r"(?!__)[A-Za-z_][A-Za-z0-9_]{0,14}")
LABEL_VALUE = re.compile(r"[ -~]{1,31}")
MAX_LABELS = 8


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


def _model(raw):
    """A model identity (birth 11, data 10, state 13), checked against the CDDL's model rule."""
    m = _named(raw, MODEL)
    if not (isinstance(m.get("name"), str) and NAME.fullmatch(m["name"]) and
            isinstance(m.get("version"), str) and MODEL_VERSION.fullmatch(m["version"])):
        raise DecodeError(f"model identity without a valid name and version: {raw!r:.80}")
    labels = m.get("labels", {})
    if not isinstance(labels, dict) or len(labels) > MAX_LABELS:
        raise DecodeError("model labels: not a map of at most 8 entries")
    for k, v in labels.items():
        if not (isinstance(k, str) and LABEL_KEY.fullmatch(k) and isinstance(v, str) and
                LABEL_VALUE.fullmatch(v)):
            raise DecodeError(f"model label {k!r}: {v!r} breaks the label rules")
    m["labels"] = dict(sorted(labels.items()))
    return m


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
        if "model_change" in msg and (msg["model_change"] is not True or
                                      msg["level"] != msg["prev_level"] or "model" not in msg):
            raise DecodeError("model_change: true only, with level == prev_level and a model")
        if "verdict" in msg:
            msg["verdict"] = _verdict(msg["verdict"])
    elif kind == "cmd":
        msg["command"] = COMMANDS.get(msg["command"], "unknown")
        if "seconds" in msg and (msg["command"] != "profile" or
                                 _uint(msg["seconds"], "seconds", 61) < 1):
            raise DecodeError("seconds: 1..60, and only on cmd/profile")
    elif kind == "flight":
        return _flight_json(_flight(raw))
    elif kind == "profile":
        return _profile(raw)
    if "flight_recorder" in msg:
        msg["flight_recorder"] = _named(msg["flight_recorder"], RECORDER)
    if "profiler" in msg:
        msg["profiler"] = _named(msg["profiler"], PROFILER)
    if "model" in msg:
        msg["model"] = _model(msg["model"])
    return msg


# --- flight recordings ------------------------------------------------------------------------

def _check(ok, what):
    if not ok:
        raise DecodeError(what)


def _uint(v, what, limit=U64):
    _check(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < limit,
           f"{what}: want an unsigned integer below {limit}, got {v!r:.40}")
    return v


def _int(v, what):
    _check(isinstance(v, int) and not isinstance(v, bool) and -U64 <= v < U64,
           f"{what}: want an integer, got {v!r:.40}")
    return v


def _number(v, what, null=False):
    if v is None and null:
        return v
    if isinstance(v, float):
        _check(math.isfinite(v), f"{what}: not finite")
        return v
    _check(isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < U64,
           f"{what}: want a number, got {v!r:.40}")
    return v


def _text(v, pattern, what):
    _check(isinstance(v, str) and pattern.fullmatch(v) is not None, f"{what}: bad string {v!r:.40}")
    return v


def _reason(v):
    _check(isinstance(v, str) and 1 <= len(v.encode()) <= 255 and
           not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in v), "reason: bad text")
    return v


def _list(v, what, limit):
    _check(isinstance(v, list) and len(v) <= limit, f"{what}: want an array of at most {limit}")
    return v


def _required(raw, keys, what):
    missing = [k for k in keys if k not in raw]
    _check(not missing, f"{what}: missing keys {missing}")


def _after(base, delta, what):
    """base + delta, which must stay within uint64."""
    value = base + delta
    _check(0 <= value < U64, f"{what}: {value} is outside uint64")
    return value


def _trigger(raw):
    _check(isinstance(raw, dict), "trigger: want a map")
    _required(raw, [0, 1], "trigger")
    t = _named(raw, TRIGGER)
    t["cause"] = CAUSES[_uint(t["cause"], "cause", len(CAUSES))]
    t["level"] = LEVELS[_uint(t["level"], "level", len(LEVELS))]
    if "prev_level" in t:
        t["prev_level"] = LEVELS[_uint(t["prev_level"], "prev_level", len(LEVELS))]
    if "rule" in t:
        _text(t["rule"], NAME, "rule")
    if "stage" in t:
        _text(t["stage"], STAGE_NAME, "stage")
    for key in ("value", "bound"):
        if key in t:
            _number(t[key], key)
    if "reason" in t:
        _reason(t["reason"])
    return t


def _forensic_head(raw, end_key, names, kind):
    """A forensic document's map with keys 2..end_key-1 required, named by COMMON and `names`,
    its time, session and number checked as unsigned integers."""
    _required(raw, [2, 3, *range(4, end_key)], kind)
    d = _named(raw, {**COMMON, **names})
    d["kind"] = kind
    _uint(d["time_ns"], "time_ns")
    _uint(d["session"], "session", 1 << 32)
    _uint(d["number"], "number", 1 << 32)
    return d


def _flight(raw):
    """The CDDL's flight rules over a decoded map; figures made absolute (deltas added back)."""
    f = _forensic_head(raw, 14, FLIGHT, "flight")
    for key in ("trigger_mono_ns", "pre_ns", "post_ns", "period_ns"):
        _uint(f[key], key)
    f["trigger"] = _trigger(f["trigger"])
    trigger = f["trigger_mono_ns"]

    stages = _list(f["stages"], "stages", FLIGHT_MAX_STAGES)
    for s in stages:
        _text(s, STAGE_NAME, "stage name")
    _check(len(set(stages)) == len(stages), "stages: a name twice")

    columns = []
    for c in _list(f["columns"], "columns", FLIGHT_MAX_COLUMNS):
        _check(isinstance(c, list) and len(c) == 3, "column: want [name, unit, kind]")
        columns.append({"name": _text(c[0], NAME, "column name"),
                        "unit": _text(c[1], UNIT, "column unit"),
                        "kind": METRIC_KINDS[_uint(c[2], "column kind", len(METRIC_KINDS))]})
    f["columns"] = columns

    ticks, totals, time = [], {}, trigger
    for i, t in enumerate(_list(f["ticks"], "ticks", FLIGHT_MAX_TICKS)):
        _check(isinstance(t, list) and len(t) == 2 and isinstance(t[1], dict),
               "tick: want [time delta, values]")
        delta = _int(t[0], "tick time delta")
        _check(i == 0 or delta >= 0, "ticks: time goes backwards")
        time = _after(time, delta, "tick time")
        values = {}
        for column, v in sorted(t[1].items(), key=lambda kv: kv[0] if isinstance(kv[0], int) else -1):
            _uint(column, "tick column", len(columns))
            if columns[column]["kind"] == "counter" and v is not None:
                totals[column] = _after(totals.get(column, 0), _int(v, "counter"), "counter total")
                v = totals[column]
            else:
                v = _number(v, "tick value", null=True)
            values[column] = v
        ticks.append({"mono_ns": time, "values": values})
    f["ticks"] = ticks

    flat = _list(f["spans"], "spans", 4 * FLIGHT_MAX_SPANS)
    _check(len(flat) % 4 == 0, "spans: not 4 items each")
    spans, frame, start = [], 0, trigger
    for i in range(0, len(flat), 4):
        stage = _uint(flat[i], "span stage", len(stages))
        frame = _after(frame, _int(flat[i + 1], "frame delta"), "frame id")
        delta = _int(flat[i + 2], "start delta")
        _check(i == 0 or delta >= 0, "spans: start goes backwards")
        start = _after(start, delta, "span start")
        spans.append({"stage": stage, "frame": frame, "start_ns": start,
                      "duration_ns": _uint(flat[i + 3], "duration")})
    f["spans"] = spans

    truncated = {k: 0 for k in TRUNCATION.values()}
    if "truncated" in f:
        _check(isinstance(f["truncated"], dict), "truncated: want a map")
        for k, v in _named(f["truncated"], TRUNCATION).items():
            truncated[k] = _uint(v, k)
    f["truncated"] = truncated
    if "verdict" in f:
        f["verdict"] = _verdict(f["verdict"])
    if "historical" in f:
        _check(isinstance(f["historical"], bool), "historical: want a bool")
    else:
        f["historical"] = False
    return f


def _flight_json(f):
    """The JSON form of em_flight_to_json(): names for indices, times also from the trigger,
    counter columns as the increase since the previous tick that carried a number for them."""
    trigger, columns = f["trigger_mono_ns"], f["columns"]
    out = {k: f[k] for k in ("v", "kind", "time_ns", "session", "number", "trigger",
                             "trigger_mono_ns", "pre_ns", "post_ns", "period_ns", "stages")}
    out["columns"] = columns
    ticks, last = [], {}
    for t in f["ticks"]:
        values = {}
        for column, v in t["values"].items():
            if columns[column]["kind"] == "counter" and v is not None:
                v, last[column] = v - last.get(column, 0), v
            values[columns[column]["name"]] = v
        ticks.append({"mono_ns": t["mono_ns"], "t_ns": t["mono_ns"] - trigger, "values": values})
    out["ticks"] = ticks
    out["spans"] = [{"stage": f["stages"][s["stage"]], "frame": s["frame"],
                     "start_ns": s["start_ns"], "t_ns": s["start_ns"] - trigger,
                     "duration_ns": s["duration_ns"]} for s in f["spans"]]
    if any(f["truncated"].values()):
        out["truncated"] = f["truncated"]
    if "verdict" in f:
        out["verdict"] = f["verdict"]
    if f["historical"]:
        out["historical"] = True
    return out


def _forensic_map(payload, max_bytes, kind, name, what):
    """The top-level map of a forensic document (a flight recording, kind 5, or a stack profile,
    kind 6): at most max_bytes of CBOR (else "larger than a <name> may be"), a map of version 1
    and that kind ("not an edgemon v1 <what>"), unsigned keys."""
    _check(len(payload) <= max_bytes, f"larger than a {name} may be")
    try:
        raw = cbor2.loads(payload)
    except Exception as e:  # cbor2 raises several types for bad input
        raise DecodeError(f"not CBOR: {e}") from e
    _check(isinstance(raw, dict) and raw.get(0) == 1 and raw.get(1) == kind,
           f"not an edgemon v1 {what}")
    _check(all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in raw),
           "map keys must be unsigned integers")
    return raw


def decode_flight(payload):
    """A flight recording's CBOR bytes -> its fields with absolute figures: tick times, counter
    totals (columns by index), span frame ids and starts. Raises DecodeError on any rule of the
    CDDL's flight section it breaks."""
    raw = _forensic_map(payload, FLIGHT_MAX_BYTES, 5, "flight recording", "flight recording")
    return _flight(raw)


# --- the breach's verdict (state 15, flight 16) ---------------------------------------------

def _share(v, what):
    _check(not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v <= 1,
           f"{what}: share not within 0..1: {v!r:.40}")
    return v


def _tuples(v, what, limit, size):
    for t in _list(v, what, limit):
        _check(isinstance(t, list) and len(t) == size, f"{what}: want arrays of {size} items")
    return v


def _verdict_cause(raw):
    _check(isinstance(raw, dict), "verdict cause: want a map")
    _required(raw, [0, 1, 2], "verdict cause")
    c = _named(raw, VERDICT_CAUSE)
    code = _uint(c["cause"], "verdict cause code", 1 << 32)
    out = {"cause": VERDICT_CAUSES[code] if code < len(VERDICT_CAUSES) else "unknown"}
    if code >= len(VERDICT_CAUSES):
        out["code"] = code
    out["share"] = _share(c["share"], "verdict cause")
    evidence = c["evidence"]
    _check(isinstance(evidence, dict) and len(evidence) <= VERDICT_MAX_EVIDENCE,
           f"evidence: want a map of at most {VERDICT_MAX_EVIDENCE} figures")
    for k, v in evidence.items():
        _text(k, NAME, "evidence name")
        _number(v, f"evidence {k}")
    out["evidence"] = evidence
    if c.get("processes"):
        out["processes"] = [
            {"pid": _uint(pid, "process pid", 1 << 32), "comm": _frame_text(comm, "process comm"),
             "share": _share(share, "process")}
            for pid, comm, share in _tuples(c["processes"], "processes", VERDICT_MAX_PROCESSES, 3)]
    elif "processes" in c:
        _list(c["processes"], "processes", VERDICT_MAX_PROCESSES)
    if c.get("functions"):
        out["functions"] = [
            {"name": _frame_text(name, "function name"), "growth": _number(growth, "growth")}
            for name, growth in _tuples(c["functions"], "functions", VERDICT_MAX_FUNCTIONS, 2)]
    elif "functions" in c:
        _list(c["functions"], "functions", VERDICT_MAX_FUNCTIONS)
    return out


def _verdict(raw):
    """The verdict map (state key 15, flight key 16) and its rules V1-V4 of the CDDL, in the
    JSON form the C printer writes: causes named, processes and functions as objects."""
    _check(isinstance(raw, dict), "verdict: want a map")
    _check(all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in raw),
           "verdict: map keys must be unsigned integers")
    _required(raw, list(VERDICT), "verdict")
    v = _named(raw, VERDICT)
    out = {"stage": _text(v["stage"], STAGE_NAME, "verdict stage"),
           "statistic": _text(v["statistic"], NAME, "verdict statistic"),
           "baseline_ns": _uint(v["baseline_ns"], "baseline_ns"),
           "breach_ns": _uint(v["breach_ns"], "breach_ns"),
           "nominal_windows": _uint(v["nominal_windows"], "nominal_windows", 1 << 32)}
    causes = [_verdict_cause(c) for c in _list(v["causes"], "causes", VERDICT_MAX_CAUSES)]
    for a, b in zip(causes, causes[1:]):
        _check(b["share"] <= a["share"], "causes: not in descending share")
    out["causes"] = causes
    return out


# --- stack profiles --------------------------------------------------------------------------

def _frame_text(v, what):
    _check(isinstance(v, str) and 1 <= len(v.encode()) <= 255 and
           not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in v), f"{what}: bad text")
    return v


def _profile(raw):
    """The CDDL's profile section and its rules P1-P5 over a decoded map, in the JSON form of
    em_profile_to_json(): frames as objects, stack stages by name."""
    p = _forensic_head(raw, 15, PROFILE, "profile")
    for key in ("start_mono_ns", "duration_ns", "samples", "lost"):
        _uint(p[key], key)
    _check(1 <= _uint(p["hz"], "hz", 1001), "hz: 1..1000")
    _check(p["clock"] in CLOCKS, f"clock: {p['clock']!r:.40} is not a sampling event")
    trigger = dict(p["trigger"]) if isinstance(p["trigger"], dict) else p["trigger"]
    if isinstance(trigger, dict):  # keys 5 and 6 are not the profile's: skipped as unknown
        trigger.pop(5, None)
        trigger.pop(6, None)
    p["trigger"] = _trigger(trigger)

    stages = _list(p["stages"], "stages", PROFILE_MAX_STAGES)
    for s in stages:
        _text(s, STAGE_NAME, "stage name")
    _check(len(set(stages)) == len(stages), "stages: a name twice")

    flat = _list(p["frames"], "frames", 3 * PROFILE_MAX_FRAMES)
    _check(len(flat) % 3 == 0, "frames: not 3 items each")
    frames = []
    for i in range(0, len(flat), 3):
        kind = FRAME_KINDS[_uint(flat[i], "frame kind", len(FRAME_KINDS))]
        module = flat[i + 2]
        frames.append({"name": _frame_text(flat[i + 1], "frame name"),
                       "module": None if module is None else _frame_text(module, "module"),
                       "kind": kind})
    p["frames"] = frames

    stacks, last = [], None
    for s in _list(p["stacks"], "stacks", PROFILE_MAX_STACKS):
        _check(isinstance(s, list), "stack: want an array")
        _check(len(s) <= 3 + PROFILE_MAX_DEPTH, "stack: deeper than 256 frames")
        _check(len(s) >= 4, "stack: no frame")
        samples, off_cpu = _uint(s[0], "stack samples"), _uint(s[1], "off-CPU ns")
        _check(samples > 0 or off_cpu > 0, "stack: neither samples nor off-CPU time")
        _check(last is None or samples <= last, "stacks: not in descending samples")
        last = samples
        stage = None if s[2] is None else stages[_uint(s[2], "stack stage", len(stages))]
        stacks.append({"frames": [_uint(f, "frame index", len(frames)) for f in s[3:]],
                       "samples": samples, "off_cpu_ns": off_cpu, "stage": stage})
    p["stacks"] = stacks
    notes = _list(p.get("notes", []), "notes", PROFILE_MAX_NOTES)
    p["notes"] = [_reason(n) for n in notes]
    order = ["v", "kind", "time_ns", "session", "number", "trigger", "start_mono_ns",
             "duration_ns", "hz", "clock", "samples", "lost", "stages", "frames", "stacks",
             "notes"]
    out = {k: p[k] for k in order}
    if "truncated" in p:
        _check(isinstance(p["truncated"], dict), "truncated: want a map")
        cut = {k: 0 for k in PROFILE_TRUNCATION.values()}
        for k, v in _named(p["truncated"], PROFILE_TRUNCATION).items():
            cut[k] = _uint(v, k)
        if any(cut.values()):
            out["truncated"] = cut
    if "historical" in p:
        _check(isinstance(p["historical"], bool), "historical: want a bool")
        if p["historical"]:
            out["historical"] = True
    return out


def decode_profile(payload):
    """A stack profile's CBOR bytes -> its fields as em_profile_to_json() names them. Raises
    DecodeError on any rule of the CDDL's profile section it breaks."""
    return _profile(_forensic_map(payload, PROFILE_MAX_BYTES, 6, "profile", "stack profile"))


def values_by_name(data, birth):
    """A data message's values keyed by metric name, using the birth's dictionary."""
    names = {str(m["alias"]): m["name"] for m in birth["metrics"]}
    return {names.get(alias, f"alias.{alias}"): v for alias, v in data["values"].items()}


def encode_rebirth(time_ns):
    """The cmd message a host sends on .../cmd/rebirth."""
    return cbor2.dumps({0: 1, 1: 4, 2: time_ns, 4: 1})
