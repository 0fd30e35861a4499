"""Model cohorts through a real mosquitto and a real edgemon-aggregator: births, data and state
messages naming models (proto/edgemon.cddl, "model identity") are published here with paho and
cbor2, and what the aggregator answers is checked against what was published: each device's
current model in /api/devices, the cohorts of /api/models, the windows of /api/cohort (split by
the model each data message carried, its units, percentiles, levels, RSS slopes and IPC computed
here from the published windows), edgemon_model_info in /metrics, and that a change of model
(a state whose level is its previous level) is not a level change in the history."""

import json
import math
import time
import urllib.parse

import cbor2
import pytest

from conftest import Aggregator, Broker, mqtt_client, wait_for

S = 1_000_000_000
T0 = (int(time.time()) // 60 - 10) * 60 * S  # ten minutes ago, on a minute
LABELS = {"input": "224x224", "variant": "full"}
LIGHT = {"input": "224x224", "variant": "light", "note": 'a"b\\c'}


def model(version, labels=LABELS):
    return {0: "mobilenet", 1: version, 2: labels}


def birth(device, m):
    return {0: 1, 1: 0, 2: T0 - S, 3: 1, 4: device, 5: "0.1.0", 6: "generic", 7: 5 * S,
            8: [{0: 1, 1: "mem.rss", 2: "By", 3: 0}, {0: 2, 1: "pmu.ipc", 2: "1", 3: 0}],
            9: [], 11: m}


def data(seq, t, span_ns, count, level, m, rss=None, ipc=None):
    """A data message whose `count` infer spans all last span_ns (scale 0: one bucket)."""
    values = {}
    if rss is not None:
        values[1] = rss
    if ipc is not None:
        values[2] = ipc
    idx = math.floor(math.log2(span_ns - 0.5))
    stage = {0: "infer", 1: count, 2: count * span_ns, 3: span_ns, 4: span_ns, 5: span_ns,
             6: span_ns, 7: span_ns, 8: span_ns, 9: 0, 11: [idx, count]}
    return {0: 1, 1: 1, 2: t, 3: 1, 4: seq, 5: 5 * S, 6: values, 7: [stage], 8: level, 10: m}


def state(t, level, prev, m, reason):
    s = {0: 1, 1: 2, 2: t, 3: 1, 4: level, 5: prev, 6: t, 11: reason, 13: m}
    if level == prev:
        s[14] = True  # A change of model.
    return s


# What is published: a window every 5 s for two minutes per device.
#   m-0001: version 1.4 the first minute (1 ms spans, NOMINAL, ipc 1.5), 1.5 the second (2 ms,
#           WARN, rss 1000 + 8 t); then DEGRADED (a level change) and a change of model to the
#           light variant (model_change, level == prev_level).
#   m-0002: 1.5 throughout (3 ms spans, NOMINAL, its last 3 windows CRITICAL, rss 9000 - 4 t).
WINDOWS = []
for k in range(24):
    t = T0 + k * 5 * S
    ts = k * 5
    if k < 12:
        WINDOWS.append(("m-0001", k, t, 1_000_000, 0, "1.4", None, 1.5))
    else:
        WINDOWS.append(("m-0001", k, t, 2_000_000, 1, "1.5", 1000 + 8 * ts, None))
    WINDOWS.append(("m-0002", k, t, 3_000_000, 0 if k < 21 else 3, "1.5", 9000 - 4 * ts, None))
LEVELS = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    broker = Broker(tmp)
    broker.start()
    agg = Aggregator(tmp, broker.port).start()
    c = mqtt_client(broker.port, client_id="models-pub")
    pubs = [("edgemon/v1/m-0001/birth", birth("m-0001", model("1.4")), True),
            ("edgemon/v1/m-0002/birth", birth("m-0002", model("1.5")), True)]
    for dev, seq, t, span, level, version, rss, ipc in WINDOWS:
        pubs.append((f"edgemon/v1/{dev}/data",
                     data(seq, t, span, 10, level, model(version), rss, ipc), False))
    end = T0 + 120 * S
    pubs.append(("edgemon/v1/m-0001/state", state(end, 2, 1, model("1.5"), "infer slow"), True))
    pubs.append(("edgemon/v1/m-0001/state",
                 state(end + S, 2, 2, model("1.5", LIGHT), "model: light"), True))
    for topic, msg, retain in pubs:
        c.publish(topic, cbor2.dumps(msg), qos=1, retain=retain).wait_for_publish(5)
    c.loop_stop()
    c.disconnect()

    def devices_done():
        s, body = agg.get("/api/devices")
        devs = {d["device"]: d for d in json.loads(body)["devices"]} if s == 200 else {}
        m = devs.get("m-0001", {}).get("model")
        return m and m["labels"].get("variant") == "light" and \
            devs.get("m-0002", {}).get("data_messages") == 24
    wait_for(devices_done, 15, "the published messages to be ingested")
    wait_for(lambda: cohort(agg, select="version=1.5")[1].get("windows") == 36, 10,
             "the windows to be committed")
    yield broker, agg
    agg.stop()
    broker.stop()


def cohort(agg, **params):
    params.setdefault("from", T0)
    params.setdefault("to", T0 + 120 * S)
    status, body = agg.get("/api/cohort?" + urllib.parse.urlencode(params))
    return status, json.loads(body)


def bucket_bounds(spans, q):
    """(lower, upper] of the scale-0 bucket holding rank ceil(q * n) of spans (all > 1)."""
    ordered = sorted(spans)
    v = ordered[max(1, math.ceil(q * len(ordered))) - 1]
    i = math.floor(math.log2(v - 0.5))
    return 2 ** i, 2 ** (i + 1)


def test_devices_show_their_current_model(host):
    _, agg = host
    devs = {d["device"]: d for d in json.loads(agg.get("/api/devices")[1])["devices"]}
    assert devs["m-0001"]["model"] == {"name": "mobilenet", "version": "1.5", "labels": LIGHT}
    assert devs["m-0002"]["model"] == {"name": "mobilenet", "version": "1.5", "labels": LABELS}
    one = json.loads(agg.get("/api/devices/m-0001")[1])
    assert one["model"]["labels"]["note"] == 'a"b\\c'
    # The change of model kept the level of the change before it, and its reason.
    assert one["level"] == "DEGRADED" and one["reason"] == "infer slow"


def test_models_groups_devices_by_identity(host):
    _, agg = host
    status, body = agg.get("/api/models")
    assert status == 200
    models = json.loads(body)["models"]
    assert models == [
        {"name": "mobilenet", "version": "1.5", "labels": LABELS, "devices": ["m-0002"]},
        {"name": "mobilenet", "version": "1.5", "labels": LIGHT, "devices": ["m-0001"]},
    ] or models == [
        {"name": "mobilenet", "version": "1.5", "labels": LIGHT, "devices": ["m-0001"]},
        {"name": "mobilenet", "version": "1.5", "labels": LABELS, "devices": ["m-0002"]},
    ]
    assert json.loads(agg.get("/api/models?version=1.4")[1]) == {"models": []}
    assert [m["devices"] for m in json.loads(agg.get("/api/models?model=mobilenet&version=1.5")[1])
            ["models"]] in (
        [["m-0002"], ["m-0001"]], [["m-0001"], ["m-0002"]])
    assert agg.get("/api/models?colour=red")[0] == 400


def test_cohort_splits_windows_by_the_model_they_carried(host):
    _, agg = host
    for select, version in (("version=1.5", "1.5"), ("model=mobilenet,version=1.4,variant=full",
                                                      "1.4")):
        status, got = cohort(agg, select=select, unit=30)
        assert status == 200, got
        mine = [w for w in WINDOWS if w[5] == version]
        assert got["select"] == select and got["unit_s"] == 30
        assert got["devices"] == sorted({w[0] for w in mine})
        assert got["windows"] == len(mine)
        assert got["levels"] == {name: sum(1 for w in mine if w[4] == i)
                                 for i, name in enumerate(LEVELS)}
        [st] = got["stages"]
        spans = [w[3] for w in mine for _ in range(10)]
        assert st["stage"] == "infer" and st["count"] == len(spans)
        assert st["mean_ns"] == pytest.approx(sum(spans) / len(spans))
        for key, q in (("p50_ns", 0.5), ("p95_ns", 0.95), ("p99_ns", 0.99)):
            lo, hi = bucket_bounds(spans, q)
            assert lo <= st[key] <= hi, (key, st[key], lo, hi)
        units = {}
        for dev, _, t, span, *_ in mine:
            start = t - t % (30 * S)
            units.setdefault((dev, start), []).extend([span] * 10)
        assert [(u["device"], u["start_ns"]) for u in st["units"]] == sorted(units)
        for u in st["units"]:
            spans_u = units[(u["device"], u["start_ns"])]
            assert u["count"] == len(spans_u)
            assert u["mean_ns"] == pytest.approx(sum(spans_u) / len(spans_u))
            assert u["p99_ns"] == max(spans_u)  # all equal: min == max clamps the percentile
        slopes = {}
        for dev in got["devices"]:
            pts = [((w[2] - T0) / S, w[6]) for w in mine if w[0] == dev and w[6] is not None]
            if len(pts) >= 3:
                mt = sum(p[0] for p in pts) / len(pts)
                my = sum(p[1] for p in pts) / len(pts)
                slopes[dev] = (sum((t - mt) * (y - my) for t, y in pts)
                               / sum((t - mt) ** 2 for t, _ in pts), len(pts))
        assert {s["device"]: (pytest.approx(s["bytes_per_s"]), s["points"])
                for s in got["rss_slope"]} == slopes
        ipcs = [w[7] for w in mine if w[7] is not None]
        assert got["ipc"] == ({"mean": pytest.approx(sum(ipcs) / len(ipcs)), "windows": len(ipcs)}
                              if ipcs else None)


def test_cohort_device_glob_and_empty_answers(host):
    _, agg = host
    status, got = cohort(agg, select="version=1.5", device="m-0002")
    assert status == 200 and got["devices"] == ["m-0002"] and got["windows"] == 24
    status, got = cohort(agg, select="version=1.5", device="nothing-*")
    assert status == 200 and got["devices"] == [] and got["windows"] == 0
    assert got["stages"] == [] and got["rss_slope"] == [] and got["ipc"] is None
    status, got = cohort(agg, select="version=9.9")
    assert status == 200 and got["windows"] == 0


@pytest.mark.parametrize("query,says", [
    ("", "select: required"),
    ("select=version", "select: 'version' is not key=value"),
    ("select=ver%00sion=1", "select: missing, malformed or too long a value"),
    ("select=" + "x" * 5000, "select: missing, malformed or too long a value"),
    ("select=" + ",".join(f"k{i}=v" for i in range(11)), "select: more than 10 terms"),
    ("select=__name__=x", "select: '__name__' is neither model"),
    ("select=version=1&unit=5", "unit: '5' is not a number of seconds from 10 to 3600"),
    ("select=version=1&from=20&to=10", "from: must be before to"),
    ("select=version=1&from=0&to=604800000000001", "to: more than 7 days after from"),
    ("select=version=1&select=version=2", "select: given more than once"),
    ("select=version=1&device=" + "*" * 200, "device: longer than 128 bytes"),
])
def test_cohort_refuses_bad_parameters(host, query, says):
    _, agg = host
    status, body = agg.get("/api/cohort?" + query)
    assert status == 400, body
    assert says in json.loads(body)["error"]
    assert agg.get("/healthz")[0] == 200  # still serving


def test_model_info_in_metrics(host):
    _, agg = host
    status, text = agg.get("/metrics")
    assert status == 200
    assert "# TYPE edgemon_model_info gauge" in text
    assert ('edgemon_model_info{device="m-0001",model="mobilenet",version="1.5",'
            'label_input="224x224",label_note="a\\"b\\\\c",label_variant="light"} 1') in text
    assert ('edgemon_model_info{device="m-0002",model="mobilenet",version="1.5",'
            'label_input="224x224",label_variant="full"} 1') in text


def test_change_of_model_is_not_a_level_change(host):
    _, agg = host
    status, body = agg.get(f"/api/devices/m-0001/history?from={T0}&to={T0 + 300 * S}")
    assert status == 200
    levels = json.loads(body)["levels"]
    assert [(c["prev_level"], c["level"], c["reason"]) for c in levels] == [
        ("WARN", "DEGRADED", "infer slow")]
