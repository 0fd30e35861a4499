"""edgemon-aggregator's limits against a real mosquitto, real edgemon-sim traffic and a real
SQLite file: the WAL is checkpointed into the database while it runs, topics and payloads must
agree, /metrics degrades past its cap (and /healthz says so), silent devices are forgotten."""

import json
import os
import re
import subprocess
import time

import paho.mqtt.client as mqtt

from conftest import ROOT, wait_for

SIM = os.environ.get("EM_SIM")


def metric(agg, name):
    """The value of an unlabelled (or first labelled) sample of `name`, or None."""
    status, body = agg.get("/metrics")
    if status != 200:
        return None
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def sim(port, devices, rate, seconds):
    assert SIM, "EM_SIM must name the edgemon-sim binary"
    return subprocess.run([SIM, "--broker", f"mqtt://127.0.0.1:{port}", "--devices", str(devices),
                           "--rate", str(rate), "--duration", str(seconds)],
                          capture_output=True, text=True, timeout=seconds + 30)


def publisher(port):
    c = mqtt.Client(client_id=f"it-lim-{time.monotonic_ns()}")
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def test_wal_is_checkpointed_into_the_database_while_running(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    r = sim(broker.port, 20, 10, 5)
    assert r.returncode == 0, r.stderr
    # The checkpointer once copied nothing (its connection had not read the database, so it did
    # not know it was in WAL mode): PATH stayed at 4096 bytes while PATH-wal grew.
    wait_for(lambda: (metric(agg, "edgemon_aggregator_checkpoint_frames_total") or 0) > 0, 20,
             "a checkpoint that copies frames")
    wait_for(lambda: agg.db.stat().st_size > 256 * 1024, 20, "rows in the database file itself")
    assert agg.proc.poll() is None
    assert metric(agg, "edgemon_aggregator_checkpoint_errors_total") == 0
    assert metric(agg, "edgemon_aggregator_store_errors_total") == 0
    assert metric(agg, "edgemon_aggregator_wal_bytes") is not None


def test_topic_and_payload_must_agree(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    birth = (ROOT / "proto" / "vectors" / "birth_full.cbor").read_bytes()  # device orin-07.lab:left
    data = (ROOT / "proto" / "vectors" / "data_basic.cbor").read_bytes()
    pub = publisher(broker.port)
    for topic, payload in (("edgemon/v1/a/b/data", data),        # an extra level
                           ("edgemon/v1/x/birth/", birth),       # a trailing slash
                           ("edgemon/v1/y/birth/extra", birth),  # a level after the kind
                           ("edgemon/v1/z/telemetry", data),     # not a kind
                           ("edgemon/v1/mism/birth", birth),     # another device's birth
                           ("edgemon/v1/kind/state", data)):     # data on the state topic
        pub.publish(topic, payload, qos=1).wait_for_publish()
    pub.publish("edgemon/v1/orin-07.lab:left/birth", birth, qos=1).wait_for_publish()
    pub.loop_stop()
    pub.disconnect()

    def rejected(reason):
        _, body = agg.get("/metrics")
        m = re.search(rf'^edgemon_aggregator_rejected_total{{reason="{reason}"}} (\S+)$', body,
                      re.M)
        return float(m.group(1)) if m else None

    wait_for(lambda: json.loads(agg.get("/api/devices")[1])["devices"], 10, "the valid birth")
    wait_for(lambda: rejected("topic") == 4, 10, "four bad topics counted")
    assert rejected("device_mismatch") == 1
    assert rejected("kind_mismatch") == 1
    listed = [d["device"] for d in json.loads(agg.get("/api/devices")[1])["devices"]]
    assert listed == ["orin-07.lab:left"]
    assert "message(s) rejected so far" in agg.log_text()
    assert agg.stop() == 0
    import sqlite3
    con = sqlite3.connect(f"file:{agg.db}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM devices")]
    finally:
        con.close()
    assert names == ["orin-07.lab:left"]


def test_metrics_past_its_cap_degrade_and_healthz_says_so(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port, extra_args=["--metrics-max-bytes", "1048576"])
    r = sim(broker.port, 300, 2, 4)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: metric(agg, "edgemon_aggregator_devices") == 300, 20, "300 devices")
    # Past 1 MiB, /metrics once answered 500 for good while /healthz said ok.
    wait_for(lambda: metric(agg, "edgemon_aggregator_metrics_truncated") == 1, 20,
             "a truncated exposition")
    status, body = agg.get("/metrics")
    assert status == 200
    assert len(body.encode()) <= 1048576
    omitted = float(re.search(r"^edgemon_aggregator_metrics_devices_omitted (\S+)$", body,
                              re.M).group(1))
    assert 0 < omitted < 300
    assert 'edgemon_device_data_messages_total{device="sim-0001"}' in body
    assert 'device="sim-0300"' not in body
    assert "edgemon_aggregator_received_total" in body
    status, body = agg.get("/healthz")
    assert status == 200
    assert body.startswith("degraded: /metrics left %d device(s) out" % omitted), body


def test_devices_silent_past_the_ttl_are_forgotten_and_their_history_stays(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port, extra_args=["--device-ttl", "2s"])
    pub = publisher(broker.port)
    birth = (ROOT / "proto" / "vectors" / "birth_full.cbor").read_bytes()
    pub.publish("edgemon/v1/orin-07.lab:left/birth", birth, qos=1).wait_for_publish()
    wait_for(lambda: agg.get("/api/devices/orin-07.lab:left")[0] == 200, 10, "the device")
    wait_for(lambda: agg.get("/api/devices/orin-07.lab:left")[0] == 404, 15,
             "the device forgotten after its TTL")
    assert metric(agg, "edgemon_aggregator_devices_expired_total") == 1
    assert metric(agg, "edgemon_aggregator_devices") == 0
    assert metric(agg, "edgemon_aggregator_device_ttl_seconds") == 2
    assert "forgot 1 device(s)" in agg.log_text()
    # It speaks again: a new record.
    pub.publish("edgemon/v1/orin-07.lab:left/birth", birth, qos=1).wait_for_publish()
    wait_for(lambda: agg.get("/api/devices/orin-07.lab:left")[0] == 200, 10, "the device again")
    pub.loop_stop()
    pub.disconnect()
    assert agg.stop() == 0
    import sqlite3
    con = sqlite3.connect(f"file:{agg.db}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT count(*) FROM devices WHERE name = 'orin-07.lab:left'"
                           ).fetchone()[0] == 1
    finally:
        con.close()


def test_device_ttl_and_metrics_cap_are_checked(tmp_path):
    from conftest import AGGREGATOR
    for args in (["--device-ttl", "soon"], ["--metrics-max-bytes", "1000"]):
        r = subprocess.run([AGGREGATOR, *args, "--check"], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 2, (args, r.stderr)
    cfg = tmp_path / "agg.ini"
    cfg.write_text("[aggregator]\ndevice_ttl = 12h\nmetrics_max_bytes = 2097152\n")
    r = subprocess.run([AGGREGATOR, "--config", str(cfg), "--check"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0, r.stderr
