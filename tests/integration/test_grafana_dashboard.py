"""host/grafana/edgemon-fleet.json against a real Prometheus scraping a real edgemon-aggregator.

The dashboard is checked twice. Its structure: schema version, unique panel ids, every panel on
the `DS` datasource variable with at least one PromQL target, and every `$variable` it uses
defined (or one of Grafana's own). Its queries: a mosquitto, an aggregator fed by two
edgemon-sim fleets (one still publishing, with one device six times slower; one that has
stopped, so its devices are offline, one of them DEGRADED by the protocol's own test vector),
and a Prometheus (native histograms on, as the dashboard assumes) scraping the aggregator
every second. Each target's expression, with the template variables as Grafana would
substitute them ($device one of the simulated devices, found through the variable's own
label_values query), goes to Prometheus's instant query API and must return at least one
finite value; every edgemon_* name in it must be a series Prometheus holds (so a misspelt
name behind `or vector(0)` fails too). A few panels are also checked against what the fleet
is known to be: two devices offline, the DEGRADED one listed, the slow device the slowest of
every stage. A failure names the panel, the target and the expression."""

import json
import math
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT, mqtt_client, wait_for

SIM = os.environ.get("EM_SIM")
DASHBOARD = ROOT / "host" / "grafana" / "edgemon-fleet.json"
DEGRADED_VECTOR = ROOT / "proto" / "vectors" / "state_degraded.cbor"
SLOW_DEVICE = "sim-0004"  # --slow 4:6
GONE = ("gone-0001", "gone-0002")  # the fleet that has stopped
DEGRADED = "gone-0001"  # level DEGRADED from the test vector
# What Grafana would put in place of its own variables: $__rate_interval is at least four
# scrape intervals (1 s here) plus the query step; $__range the dashboard's time range.
BUILTINS = {"__rate_interval": "15s", "__interval": "2s", "__range": "5m",
            "__range_s": "300", "__interval_ms": "2000"}
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
CHECK_S = 90  # all the targets together: the first rates need two scrapes of a running fleet


def load():
    return json.loads(DASHBOARD.read_text())


def all_panels(dash):
    """Every panel, those inside collapsed rows included."""
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def query_panels(dash):
    return [p for p in all_panels(dash) if p["type"] != "row"]


def substitute(text, values):
    """text with every $name / ${name} / ${name:format} replaced from values; a name that is not
    there fails the test."""
    def one(m):
        name = m.group(1) or m.group(2)
        assert name in values, f"template variable ${name} in {text!r} is not defined"
        return values[name]
    return VARIABLE.sub(one, text)


def ds_ref():
    """How every panel, target and query variable names its data source."""
    return {"type": "prometheus", "uid": "${DS}"}


def where(panel, target=None):
    what = f"panel {panel['id']} '{panel['title']}'"
    return f"{what} target {target['refId']}" if target else what


def test_structure_ids_datasources_targets_and_variables():
    dash = load()
    assert dash["schemaVersion"] == 39
    assert dash["uid"] and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables.get("DS")
    assert ds and ds["type"] == "datasource" and ds["query"] == "prometheus"
    device = variables.get("device")
    assert device and device["type"] == "query"
    assert device["datasource"] == ds_ref()
    known = set(variables) | set(BUILTINS)

    ids = [p["id"] for p in all_panels(dash)]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {sorted(ids)}"
    panels = query_panels(dash)
    assert len(panels) >= 20
    for p in panels:
        assert p.get("datasource") == ds_ref(), where(p)
        assert p.get("targets"), f"{where(p)} has no target"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), f"{where(p)}: refIds repeat {refs}"
        for t in p["targets"]:
            assert t.get("expr", "").strip(), f"{where(p, t)} has no expr"
            assert t.get("datasource", ds_ref()) == ds_ref(), where(p, t)
            for text in (t["expr"], t.get("legendFormat", ""), p["title"]):
                for m in VARIABLE.finditer(text):
                    name = m.group(1) or m.group(2)
                    assert name in known, f"{where(p, t)}: ${name} in {text!r} is not defined"
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24, where(p)

    # The fleet percentiles come in both forms: classic buckets and native histograms.
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert any("histogram_quantile(0.99, sum by (le, stage)" in e and "_bucket[" in e
               for e in exprs)
    assert any("histogram_quantile(0.99, sum by (stage)" in e and
               "edgemon_stage_latency_nanoseconds[" in e for e in exprs)
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert len(rows) == 4, rows


def run_sim(broker, *args):
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    cmd = [SIM, "--rate", "5", "--qos", "1", "--broker", f"mqtt://127.0.0.1:{broker.port}",
           *args]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture
def fleet(stack):
    """A Prometheus (native histograms) scraping an aggregator that holds a stopped fleet (two
    devices offline, one DEGRADED) and a running one (four devices, sim-0004 slow); yields the
    Prometheus."""
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    gone = run_sim(broker, "--devices", "2", "--duration", "2", "--prefix", "gone")
    _, err = gone.communicate(timeout=60)
    assert gone.returncode == 0, err.decode(errors="replace")
    client = mqtt_client(broker.port)
    client.publish(f"edgemon/v1/{DEGRADED}/state", DEGRADED_VECTOR.read_bytes(), qos=1,
                   retain=True).wait_for_publish()
    client.loop_stop()
    client.disconnect()
    # Stopped by SIGTERM (it publishes its devices offline) before the stack stops the broker;
    # --duration ends it anyway.
    sim = run_sim(broker, "--devices", "4", "--duration", "300", "--seed", "19",
                  "--slow", "4:6")
    try:
        prom = stack.prometheus([f"127.0.0.1:{agg.port}"],
                                extra_args=["--enable-feature=native-histograms"])
        # The slow device's data (births come first, so its name alone is not enough).
        wait_for(lambda: prom.query(
            f'edgemon_stage_latency_nanoseconds{{device="{SLOW_DEVICE}"}}'), 60,
            f"the native histograms of {SLOW_DEVICE} in Prometheus")
        yield prom
    finally:
        sim.terminate()
        sim.wait(30)


def instant(prom, expr):
    """(result, error) of an instant query at now: the API's result (a list of samples, or
    [time, value] for a scalar), or the error text."""
    url = (f"http://127.0.0.1:{prom.port}/api/v1/query?" +
           urllib.parse.urlencode({"query": expr}))
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            got = json.loads(r.read())
    except urllib.error.HTTPError as e:
        return None, e.read().decode(errors="replace")
    except OSError as e:
        return None, str(e)
    if got.get("status") != "success":
        return None, got.get("error", "query failed")
    return got["data"]["result"], None


def finite_values(result):
    """The finite values of an instant query's result (a vector or a scalar)."""
    if result and not isinstance(result[0], dict):
        result = [{"value": result}]
    values = [float(r["value"][1]) for r in result if "value" in r]
    return [v for v in values if math.isfinite(v)]


def variable_values(prom, variable):
    """The values of a label_values(metric, label) query variable, as Grafana resolves it."""
    q = variable["query"]
    text = q["query"] if isinstance(q, dict) else q
    m = re.fullmatch(r"\s*label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*", text)
    assert m, f"variable {variable['name']}: {text!r} is not label_values(metric, label)"
    got = prom.api(f"/api/v1/label/{m.group(2)}/values?" +
                   urllib.parse.urlencode({"match[]": m.group(1)}))
    return got["data"] if got and got.get("status") == "success" else []


def resolved(prom):
    """The dashboard's substitutions: Grafana's own variables and $device = the slow device,
    once the device variable's query lists every simulated device."""
    dash = load()
    device = next(v for v in dash["templating"]["list"] if v["name"] == "device")
    want = {SLOW_DEVICE, *GONE}
    values = wait_for(lambda: want <= set(variable_values(prom, device)) and
                      variable_values(prom, device), 30, f"the device variable to list {want}")
    assert all(re.fullmatch(r"(sim|gone)-\d{4}", v) for v in values), values
    return dash, {**BUILTINS, "device": SLOW_DEVICE, "DS": "prometheus"}


def test_every_target_returns_data(fleet):
    prom = fleet
    dash, values = resolved(prom)
    names = set(prom.api("/api/v1/label/__name__/values")["data"])
    failures, deadline = [], time.monotonic() + CHECK_S
    for p in query_panels(dash):
        for t in p["targets"]:
            expr = substitute(t["expr"], values)
            missing = sorted(set(re.findall(r"\bedgemon_\w+", expr)) - names)
            if missing:
                failures.append(f"{where(p, t)}: {expr}: no series named {missing}")
                continue
            while True:
                result, error = instant(prom, expr)
                if error:
                    why = f"error {error}"
                elif not result:
                    why = "empty result"
                elif not finite_values(result):
                    why = f"no finite value in {result[:3]}"
                else:
                    break
                if time.monotonic() > deadline:
                    failures.append(f"{where(p, t)}: {expr}: {why}")
                    break
                time.sleep(0.5)
    assert not failures, "\n".join(failures)


def panel(dash, title):
    found = [p for p in query_panels(dash) if p["title"] == title]
    assert len(found) == 1, f"one panel titled {title!r}, found {len(found)}"
    return found[0]


def rows(prom, p, values, ref="A"):
    t = next(t for t in p["targets"] if t["refId"] == ref)
    expr = substitute(t["expr"], values)
    result, error = instant(prom, expr)
    assert not error, f"{where(p, t)}: {expr}: {error}"
    return result or []


def test_panels_show_what_the_fleet_is(fleet):
    prom = fleet
    dash, values = resolved(prom)

    offline = panel(dash, "Devices offline")
    wait_for(lambda: [float(r["value"][1]) for r in rows(prom, offline, values)] == [2.0], 30,
             f"{where(offline)} to read 2 (the stopped fleet)")

    warn = panel(dash, "Devices in WARN or worse")
    listed = wait_for(lambda: {r["metric"]["device"]: float(r["value"][1])
                               for r in rows(prom, warn, values)}, 30, where(warn))
    assert listed.get(DEGRADED) == 2.0, f"{where(warn)}: {listed}"

    levels = panel(dash, "Devices per level")
    degraded = next(t["refId"] for t in levels["targets"] if t["legendFormat"] == "DEGRADED")
    assert float(rows(prom, levels, values, degraded)[0]["value"][1]) >= 1, where(levels)

    # The slow device is the slowest of every stage, in the fleet table and in its own panel.
    slowest = panel(dash, "Slowest devices per stage")
    top = {}
    for r in wait_for(lambda: rows(prom, slowest, values), 30, where(slowest)):
        stage, v = r["metric"]["stage"], float(r["value"][1])
        if v > top.get(stage, ("", -1.0))[1]:
            top[stage] = (r["metric"]["device"], v)
    assert top and all(d == SLOW_DEVICE for d, _ in top.values()), f"{where(slowest)}: {top}"

    mine = panel(dash, "Stage latency of $device")
    got = {r["metric"]["stage"] for r in rows(prom, mine, values, "D")}
    assert got == set(top), f"{where(mine)}: stages {got} of {SLOW_DEVICE}, fleet has {set(top)}"
