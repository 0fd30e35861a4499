"""A valid message on another kind's topic: a real edgemon-aggregator behind a real mosquitto
counts it in edgemon_aggregator_rejected_total{reason="kind_mismatch"}, never in
edgemon_aggregator_malformed_total, and stores nothing of it.

Every kind's golden vector (proto/vectors/: birth, data, state, status, cmd, flight recording,
stack profile) and a flight recording larger than any data message may be (the data decoder
refuses it by size before reading its kind) are published on the topic of every kind a device
publishes but their own. The expected counts are computed from those pairs."""

import json
import re

import cbor2

from conftest import ROOT, mqtt_client, wait_for
from test_flight_host import big_recording

DEVICE = "orin-07.lab:left"  # the device birth_full names
TOPICS = ["birth", "data", "state", "status", "flight", "profile"]
VECTORS = {"birth": "birth_full", "data": "data_basic", "state": "state_degraded",
           "status": "status_online", "cmd": "cmd_rebirth", "flight": "flight_basic",
           "profile": "profile_basic"}


def counters(agg):
    """{name or name{labels}: value} of the aggregator's own families on /metrics."""
    status, body = agg.get("/metrics")
    assert status == 200
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r"^(edgemon_aggregator_[a-z_]+(?:\{[^}]*\})?) (\d+)$", body, re.M)}


def test_every_kind_on_every_other_kinds_topic_is_a_kind_mismatch(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    payloads = [(kind, (ROOT / "proto" / "vectors" / f"{stem}.cbor").read_bytes())
                for kind, stem in VECTORS.items()]
    big = cbor2.dumps(big_recording(0, 9000))
    assert 65536 < len(big) <= 262144
    payloads.append(("flight", big))
    pairs = [(topic, kind, p) for topic in TOPICS for kind, p in payloads if kind != topic]
    before = counters(agg)
    pub = mqtt_client(broker.port, client_id="kind-mismatch-pub")
    for topic, _, payload in pairs:
        pub.publish(f"edgemon/v1/{DEVICE}/{topic}", payload, qos=1).wait_for_publish(5)
    pub.loop_stop()
    pub.disconnect()
    mismatch = 'edgemon_aggregator_rejected_total{reason="kind_mismatch"}'
    wait_for(lambda: counters(agg)["edgemon_aggregator_received_total"]
             >= before["edgemon_aggregator_received_total"] + len(pairs), 10,
             "every message received")
    after = counters(agg)
    assert after[mismatch] - before[mismatch] == len(pairs)
    assert after["edgemon_aggregator_malformed_total"] == before["edgemon_aggregator_malformed_total"]
    assert after["edgemon_aggregator_ingested_total"] == before["edgemon_aggregator_ingested_total"]
    # Nothing reached a device: the aggregator does not know it, and stored no recording.
    assert agg.get(f"/api/devices/{DEVICE}")[0] == 404
    status, body = agg.get(f"/api/devices/{DEVICE}/flights")
    assert status == 404 or json.loads(body)["flights"] == []
    # Each payload on its own topic is taken.
    pub = mqtt_client(broker.port, client_id="kind-mismatch-own")
    for kind, payload in payloads:
        if kind != "cmd":
            pub.publish(f"edgemon/v1/{DEVICE}/{kind}", payload, qos=1).wait_for_publish(5)
    pub.loop_stop()
    pub.disconnect()
    own = sum(1 for kind, _ in payloads if kind != "cmd")
    wait_for(lambda: counters(agg)["edgemon_aggregator_ingested_total"]
             == before["edgemon_aggregator_ingested_total"] + own, 10, "each on its own topic")
    assert counters(agg)[mismatch] - before[mismatch] == len(pairs)
    assert agg.proc.poll() is None
