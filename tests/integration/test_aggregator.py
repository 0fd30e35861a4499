"""edgemon-aggregator against a real mosquitto and real agents: SQLite rows, level changes,
the device API, shared subscriptions, malformed input, rebirth requests."""

import json
import sqlite3
import time

import paho.mqtt.client as mqtt
import pytest

from conftest import ROOT, wait_for

BUDGET = ("[budget.infer]\np99 = 1ms\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 300ms\nenter_windows = 1\nleave_windows = 1\n")


def rows(db, sql, *args):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def publisher(port):
    c = mqtt.Client(client_id=f"it-pub-{time.monotonic_ns()}")
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def send_spans(path, stage, duration_ns, n):
    import os
    import socket
    import struct
    span = struct.Struct("<2sBBIQQQ32s")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.connect(str(path))
        for i in range(n):
            s.send(span.pack(b"EM", 1, 1, os.getpid(), i, time.monotonic_ns(), duration_ns,
                             stage.encode()))


def test_two_agents_land_in_sqlite_with_their_level_changes(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    target = stack.target()
    agents = [stack.agent(broker.port, f"cmdline = {target.marker}", device=name,
                          runtime_dir=stack.tmp / name, extra=BUDGET)
              for name in ("agg-a", "agg-b")]
    for a in agents:
        wait_for(lambda a=a: (stack.tmp / a.device / "spans.sock").exists(), 10, "span socket")
    # agg-b breaks its budget: 5 ms spans against 1 ms.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        send_spans(stack.tmp / "agg-b" / "spans.sock", "infer", 5_000_000, 20)
        got = rows(agg.db, "SELECT count(*) FROM level_changes lc JOIN devices d "
                   "ON d.id = lc.device WHERE d.name = 'agg-b' AND lc.level = 2") \
            if agg.db.exists() else [(0,)]
        if got[0][0] > 0:
            break
        time.sleep(0.3)
    else:
        pytest.fail("no DEGRADED level change for agg-b in SQLite")

    per_device = dict(rows(agg.db, "SELECT d.name, count(*) FROM samples s JOIN devices d "
                                   "ON d.id = s.device GROUP BY d.name"))
    assert per_device.get("agg-a", 0) > 0 and per_device.get("agg-b", 0) > 0, per_device
    names = {r[0] for r in rows(agg.db, "SELECT name FROM metrics")}
    assert {"mem.rss", "target.up"} <= names
    windows = rows(agg.db, "SELECT count(*), sum(count) FROM stage_windows w JOIN devices d "
                           "ON d.id = w.device WHERE d.name = 'agg-b'")
    assert windows[0][0] > 0 and windows[0][1] >= 20

    status, body = agg.get("/api/devices")
    assert status == 200
    listed = {d["device"]: d for d in json.loads(body)["devices"]}
    assert {"agg-a", "agg-b"} <= set(listed)
    status, body = agg.get("/api/devices/agg-b")
    assert status == 200
    dev = json.loads(body)
    assert dev["level"] == "DEGRADED"
    assert dev["values"]["mem.rss"] > 0
    status, _ = agg.get("/healthz")
    assert status == 200
    assert agg.stop() == 0
    assert rows(agg.db, "PRAGMA integrity_check") == [("ok",)]


def test_share_group_splits_data_and_together_sees_every_message(stack):
    dev_id = "orin-07.lab:left"
    broker = stack.broker()
    group = ["--share-group", "fleet"]
    a1 = stack.aggregator(broker.port, name="share-1", extra_args=group)
    a2 = stack.aggregator(broker.port, name="share-2", extra_args=group)
    pub = publisher(broker.port)
    data = (ROOT / "proto" / "vectors" / "data_basic.cbor").read_bytes()
    birth = (ROOT / "proto" / "vectors" / "birth_full.cbor").read_bytes()
    # The vector's birth names its device; the topic must say the same.
    pub.publish(f"edgemon/v1/{dev_id}/birth", birth, qos=1, retain=True).wait_for_publish()
    n = 200
    for _ in range(n):
        pub.publish(f"edgemon/v1/{dev_id}/data", data, qos=1).wait_for_publish()
    pub.loop_stop()
    pub.disconnect()

    def ingested(a):
        status, body = a.get(f"/api/devices/{dev_id}")
        return json.loads(body)["data_messages"] if status == 200 else 0

    wait_for(lambda: ingested(a1) + ingested(a2) >= n, 15, "both aggregators to ingest")
    time.sleep(0.5)
    got1, got2 = ingested(a1), ingested(a2)
    assert got1 + got2 == n  # together every message, none twice
    assert 0 < got1 < n and 0 < got2 < n  # each a part
    # The retained birth reached both: both name the device's board.
    for a in (a1, a2):
        dev = json.loads(a.get(f"/api/devices/{dev_id}")[1])
        assert dev["board"] == "jetson-agx-orin"


def test_malformed_messages_are_counted_and_skipped(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    pub = publisher(broker.port)
    for payload in (b"\xff\x00", b"", bytes.fromhex("a1"), b"not cbor at all"):
        pub.publish("edgemon/v1/bad-dev/data", payload, qos=1).wait_for_publish()
    state = (ROOT / "proto" / "vectors" / "state_degraded.cbor").read_bytes()
    pub.publish("edgemon/v1/bad-dev/state", state, qos=1).wait_for_publish()
    pub.loop_stop()
    pub.disconnect()

    def metric(name):
        _, body = agg.get("/metrics")
        for line in body.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    wait_for(lambda: metric("edgemon_aggregator_malformed_total") == 3, 10,
             "three malformed messages counted")
    wait_for(lambda: json.loads(agg.get("/api/devices/bad-dev")[1]).get("level") == "DEGRADED",
             10, "the valid state after them applied")
    assert agg.proc.poll() is None


def test_data_without_a_birth_gets_a_rebirth_request(stack):
    broker = stack.broker()
    stack.aggregator(broker.port)
    seen = []
    sub = mqtt.Client(client_id="it-cmd")
    sub.on_message = lambda c, u, m: seen.append(m.topic)
    sub.connect("127.0.0.1", broker.port)
    sub.subscribe("edgemon/v1/+/cmd/#", qos=1)
    sub.loop_start()
    time.sleep(0.3)
    pub = publisher(broker.port)
    data = (ROOT / "proto" / "vectors" / "data_basic.cbor").read_bytes()
    for _ in range(3):
        pub.publish("edgemon/v1/orphan/data", data, qos=1).wait_for_publish()
    wait_for(lambda: "edgemon/v1/orphan/cmd/rebirth" in seen, 10, "a rebirth request")
    time.sleep(0.5)
    assert seen.count("edgemon/v1/orphan/cmd/rebirth") == 1  # once per session
    pub.loop_stop()
    pub.disconnect()
    sub.loop_stop()
    sub.disconnect()


@pytest.mark.parametrize("args", [["--bogus"], ["--broker", "tcp://x"], ["--batch-ms", "0"],
                                  ["--http", "nowhere"], ["--retention", "7 days"],
                                  ["--share-group", "a/b"], ["extra"]])
def test_bad_arguments_exit_2(args):
    import subprocess
    from conftest import AGGREGATOR
    r = subprocess.run([AGGREGATOR, *args], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2, (args, r.stderr)
    assert r.stderr


def test_bad_config_names_file_and_line(tmp_path):
    import subprocess
    from conftest import AGGREGATOR
    cfg = tmp_path / "agg.ini"
    cfg.write_text("[aggregator]\nbroker = mqtt://127.0.0.1:1883\nbatch_ms = lots\n"
                   "[other]\nx = 1\n")
    r = subprocess.run([AGGREGATOR, "--config", str(cfg), "--check"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 2
    assert f"{cfg}:3: batch_ms 'lots'" in r.stderr
    assert f"{cfg}:5: section [other]" in r.stderr  # reported at its first key
    cfg.write_text("[aggregator]\nbroker = mqtt://127.0.0.1:1999\nshare_group = g\n")
    r = subprocess.run([AGGREGATOR, "--config", str(cfg), "--check"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0 and "share group g" in r.stdout
