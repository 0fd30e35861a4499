"""/api/latency over 64 devices, the fewest that edgemon-aggregator reads on two connections
(the second half of the devices in a worker thread, its histograms merged in at the end) and
still the most whose raw rows it reads: real mosquitto, a real aggregator and its SQLite
store, fed by edgemon-sim. Each stage's fleet percentiles must equal the exact merge of every
stored window of every device (decoded from SQLite here), and each device's count and p99
the merge of its own windows: a half left out, merged twice, or a device's histogram put in
another device's place would not."""

import contextlib

import pytest

from conftest import Aggregator, Broker, free_port, wait_for
from test_aggregator_native import STAGES, run_sim
from test_dashboard_api import Merged, get_json, raw_windows

DEVICES = 64


def test_fleet_latency_read_in_two_halves_is_the_exact_merge(tmp_path):
    with contextlib.ExitStack() as running:
        broker = Broker(tmp_path, free_port()).start()
        running.callback(broker.stop)
        agg = Aggregator(tmp_path, broker.port).start()
        running.callback(agg.stop)
        spans = run_sim(tmp_path, broker, devices=DEVICES, slow=(DEVICES, 6.0))
        fleet, per_device = {}, {}

        def merged_store_is_complete():
            """Merges the stored windows; true once they hold every published span."""
            fleet.clear()
            per_device.clear()
            for d, s, _, c, mn, mx, scale, zero, blob in raw_windows(agg.db):
                for m in (fleet.setdefault(s, Merged()), per_device.setdefault((d, s), Merged())):
                    m.add(c, mn, mx, scale, zero, blob)
            return {k: m.count for k, m in per_device.items()} == {
                k: len(v) for k, v in spans.items()}
        wait_for(merged_store_is_complete, 60, "every published span's window in SQLite")

        status, body = get_json(agg, "/api/latency?range=15m")
        assert status == 200, body
        assert body["devices_matched"] == DEVICES and body["truncated"] is False
        assert body["data_to_ns"] == body["to_ns"]  # raw rows read: nothing cut at a watermark
        assert sorted(s["stage"] for s in body["stages"]) == sorted(STAGES)
        for s in body["stages"]:
            m = fleet[s["stage"]]
            f = s["fleet"]
            assert f["count"] == m.count == sum(len(v) for (_, st), v in spans.items()
                                                if st == s["stage"])
            for key, q in (("p50_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99),
                           ("p999_ns", 0.999)):
                assert f[key] == pytest.approx(m.quantile(q), rel=1e-9), (s["stage"], key)
            assert f["max_ns"] == max(w[2] for w in m.windows)
            ids = [d["id"] for d in s["devices"]]
            assert ids == [f"sim-{i:04d}" for i in range(1, DEVICES + 1)]
            for d in s["devices"]:
                mine = per_device[(d["id"], s["stage"])]
                assert d["count"] == mine.count == len(spans[(d["id"], s["stage"])])
                assert d["p99_ns"] == pytest.approx(mine.quantile(0.99), rel=1e-9), d["id"]
            slowest = max(s["devices"], key=lambda d: d["p99_ns"])
            assert slowest["id"] == f"sim-{DEVICES:04d}"
        assert agg.stop() == 0, agg.log_text()[-3000:]
