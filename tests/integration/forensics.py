"""What the tests of the forensic documents at the host share (test_flight_host.py for flight
recordings, test_aggregator_profiles.py for stack profiles): capturing the documents a
simulator publishes, publishing one as its device would, the aggregator's listing of a
device's documents, a raw GET, a counter of its /metrics, a document's key, the check that
replays are stored once and bad payloads counted, never stored, and the check of the API's
refusals.

A document is the decoded CBOR map of a flight recording or a stack profile (integer keys of
proto/SCHEMA.md): 2 its time, 3 the agent's session, 4 its number.
"""

import json
import os
import re
import subprocess
import threading
import urllib.request
from collections import defaultdict

import cbor2

from conftest import mqtt_client, wait_for

SIM = os.environ.get("EM_SIM")
PUBLISHED = {"flight": rb"(\d+) flight recordings published",
             "profile": rb"(\d+) stack profiles published"}


def simulate(port, devices, prefix, seed, *documents):
    """Runs edgemon-sim against the broker on `port`: `devices` devices <prefix>-NNNN at 10 Hz
    for 3 s with excursions 0.3 s apart on average, seeded, publishing `documents` (--flights,
    --profiles). Returns how many of each kind it says it published ({"flight": n, ...})."""
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    sim = subprocess.run(
        [SIM, "--devices", str(devices), "--rate", "10", "--duration", "3", "--prefix", prefix,
         "--seed", str(seed), *documents, "--excursion-mean", "0.3",
         "--broker", f"mqtt://127.0.0.1:{port}"], capture_output=True, timeout=60)
    assert sim.returncode == 0, sim.stderr.decode(errors="replace")
    return {kind: int(m.group(1)) for kind, pattern in PUBLISHED.items()
            for m in [re.search(pattern, sim.stderr)] if m}


def by_device(captured):
    """{device: [(payload, decoded map)]} of captured (device, payload) pairs, in order."""
    out = defaultdict(list)
    for device, payload in captured:
        out[device].append((payload, cbor2.loads(payload)))
    return dict(out)


class Capture:
    """Every document published on edgemon/v1/+/<kind> for each of `kinds`, in arrival order:
    got[kind] is [(device, payload bytes)]."""

    def __init__(self, port, *kinds):
        self.got = defaultdict(list)
        self.lock = threading.Lock()
        self.client = mqtt_client(port, client_id="-".join(kinds) + "-capture")
        self.client.on_message = self._on
        self.client.subscribe([(f"edgemon/v1/+/{kind}", 1) for kind in kinds])

    def _on(self, client, userdata, msg):
        _, _, device, kind = msg.topic.split("/")
        with self.lock:
            self.got[kind].append((device, bytes(msg.payload)))

    def stop(self):
        self.client.loop_stop()
        self.client.disconnect()


def publish(port, device, *payloads, kind):
    """Publishes each payload on edgemon/v1/<device>/<kind> (QoS 1), as the device would."""
    c = mqtt_client(port, client_id=f"{kind}-pub-{device}")
    for p in payloads:
        c.publish(f"edgemon/v1/{device}/{kind}", p, qos=1).wait_for_publish(5)
    c.loop_stop()
    c.disconnect()


def api_list(agg, device, query="", *, kind):
    """The entries of GET /api/devices/<device>/<kind><query> (kind: flights or profiles)."""
    status, body = agg.get(f"/api/devices/{device}/{kind}{query}")
    assert status == 200, body
    return json.loads(body)[kind]


def get_raw(agg, path):
    """(status, Content-Type, body bytes) of a successful GET of path."""
    with urllib.request.urlopen(f"http://127.0.0.1:{agg.port}{path}", timeout=5) as r:
        return r.status, r.headers.get("Content-Type"), r.read()


def metric(agg, name):
    """The value of the unlabelled counter `name` of the aggregator's /metrics."""
    status, body = agg.get("/metrics")
    assert status == 200
    return int(re.search(rf"^{name} (\d+)", body, re.M).group(1))


def key_of(m):
    """A document's key in the API: <session>-<number>."""
    return f"{m[3]}-{m[4]}"


def check_replays(broker, agg, device, payload, m, *, kind, historical_key, bad):
    """Publishes for `device`, after `payload` (decoded: m) was stored: payload again, m marked
    historical (key historical_key), garbage, payload cut in half, each map of `bad` (decodes,
    breaks a rule) and a marker (number 900, an hour earlier). Checks that only the marker is
    stored, the first copy staying as it was, that two duplicates and 2 + len(bad) malformed
    payloads are counted, and that the aggregator still runs. kind: flight or profile."""
    before = api_list(agg, device, kind=kind + "s")
    dups = metric(agg, "edgemon_aggregator_duplicates_total")
    malformed = metric(agg, "edgemon_aggregator_malformed_total")
    historical = dict(m)
    historical[historical_key] = True
    marker = dict(m)
    marker[4] = 900  # a new number: stored
    marker[2] = m[2] - 3600 * 10**9
    publish(broker.port, device, payload, cbor2.dumps(historical), b"\xff\x00garbage",
            payload[: len(payload) // 2], *(cbor2.dumps(b) for b in bad), cbor2.dumps(marker),
            kind=kind)
    wait_for(lambda: len(api_list(agg, device, kind=kind + "s")) == len(before) + 1, 10,
             f"the marker {kind}")
    after = api_list(agg, device, kind=kind + "s")
    assert sorted(e["key"] for e in after) == sorted([e["key"] for e in before] + [f"{m[3]}-900"])
    original = next(e for e in after if e["key"] == key_of(m))
    assert original["historical"] is False  # the first stored stays
    wait_for(lambda: metric(agg, "edgemon_aggregator_duplicates_total") >= dups + 2, 5,
             "two duplicates counted")
    assert metric(agg, "edgemon_aggregator_malformed_total") == malformed + 2 + len(bad)
    assert agg.proc.poll() is None


def check_refusals(agg, device, key, *, kind, list_queries, entry_queries):
    """The API's refusals for `kind` (flights or profiles): 400 naming the parameter for each
    (query, name) of list_queries on the device's list and of entry_queries on its entry
    `key`; 404 with an error for an unknown device, entry or malformed key."""
    for query, name in list_queries:
        status, body = agg.get(f"/api/devices/{device}/{kind}{query}")
        assert status == 400 and name in json.loads(body)["error"], (query, body)
    for query, name in entry_queries:
        status, body = agg.get(f"/api/devices/{device}/{kind}/{key}{query}")
        assert status == 400 and name in json.loads(body)["error"], (query, body)
    for path in [f"/api/devices/nobody/{kind}", f"/api/devices/nobody/{kind}/{key}",
                 f"/api/devices/{device}/{kind}/1-99999", f"/api/devices/{device}/{kind}/abc",
                 f"/api/devices/{device}/{kind}/1-2-3", f"/api/devices/{device}/{kind}/%00"]:
        status, body = agg.get(path)
        assert status == 404 and "error" in json.loads(body), (path, body)
