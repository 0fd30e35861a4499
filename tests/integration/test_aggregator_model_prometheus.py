"""The model identity from the application to Prometheus, every hop real: the Python client's
set_model -> the agent (model datagram) -> mosquitto -> edgemon-aggregator -> a real
Prometheus scraping its /metrics. PromQL groups a device's figures by the version it runs
through the edgemon_model_info join, and a change of version in the app reaches the query."""

import os
import re
import sys

from conftest import wait_for
from test_rings import start_agent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "firmware", "client", "python"))
import edgemon  # noqa: E402


def test_the_apps_model_reaches_prometheus_and_groups_the_devices_figures(stack):
    agent, sub, birth, path = start_agent(stack)
    port = int(re.search(r"mqtt://127\.0\.0\.1:(\d+)", agent.config.read_text()).group(1))
    agg = stack.aggregator(port)
    prom = stack.prometheus([f"127.0.0.1:{agg.port}"])
    client = edgemon.Client(str(path))
    assert client.set_model("mobilenet_v3_small", "1.4", variant="full", site="lab") is True
    try:
        info = f'edgemon_model_info{{device="{agent.device}"}}'
        got = wait_for(lambda: (r := prom.query(info)) and r[0]["metric"].get("version") == "1.4"
                       and r, 30, "edgemon_model_info of version 1.4 in Prometheus")
        assert len(got) == 1 and got[0]["value"][1] == "1"
        labels = got[0]["metric"]
        assert (labels["model"], labels["label_variant"], labels["label_site"]) == (
            "mobilenet_v3_small", "full", "lab"), labels

        # The usual info-metric join: any per-device figure, grouped by the version it runs.
        join = (f'count by (version) (edgemon_device_info{{device="{agent.device}"}} '
                f'* on(device) group_left(version) edgemon_model_info)')
        by_version = wait_for(lambda: prom.query(join), 20, "the join by version")
        assert [(r["metric"]["version"], r["value"][1]) for r in by_version] == [("1.4", "1")]

        # The app moves to 1.5: the next scrapes carry it, and the join follows.
        assert client.set_model("mobilenet_v3_small", "1.5", variant="full", site="lab") is True
        wait_for(lambda: (r := prom.query(join)) and [x["metric"]["version"] for x in r] == ["1.5"],
                 30, "the join to show version 1.5")
    finally:
        client.close()
