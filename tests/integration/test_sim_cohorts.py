"""edgemon-sim cohorts against a real mosquitto, read back with paho and the independent Python
decoder, and shown by edgemon-cli: --model gives device ranges their identity (birth key 11,
every data message key 10), --switch changes a range's version at a simulated second with one
state marked model_change (level == prev_level), and `edgemon-cli tail` and `status` show the
model each device runs."""

import json
import os
import subprocess
import uuid

import pytest

from conftest import wait_for
from test_sim import need_sim, run_sim, sim_collector

CLI = os.environ.get("EM_CLI")
FULL = {"name": "mobilenet", "version": "1.4", "labels": {"site": "lab", "variant": "full"}}


def test_cohorts_name_their_model_and_a_switch_is_one_model_change(stack):
    broker, prefix, live = sim_collector(stack, "c")
    r = run_sim(broker.port, "--devices", "3", "--rate", "10", "--duration", "3", "--prefix",
                prefix, "--model", "1-2:mobilenet:1.4:variant=full,site=lab", "--model",
                "3:resnet18:2.0", "--switch", "2:1:1.5", "--seed", "3")
    assert r.returncode == 0, r.stderr
    devices = [f"{prefix}-{i:04d}" for i in (1, 2, 3)]
    wait_for(lambda: len([m for _, m, _ in live.of("status") if not m["online"]]) == 3, 10,
             "3 offline statuses")

    births = {d: m for d, m, _ in live.of("birth")}
    assert births[devices[0]]["model"] == FULL and births[devices[1]]["model"] == FULL
    assert births[devices[2]]["model"] == {"name": "resnet18", "version": "2.0", "labels": {}}

    data = {d: [m for dd, m, _ in live.of("data") if dd == d] for d in devices}
    assert all(len(v) >= 10 for v in data.values()), {d: len(v) for d, v in data.items()}
    assert {m["model"]["version"] for m in data[devices[0]]} == {"1.4"}
    assert {m["model"]["name"] for m in data[devices[2]]} == {"resnet18"}
    # Device 2 switches at simulated second 1: its windows are 1.4, then 1.5, never back.
    versions = [m["model"]["version"] for m in data[devices[1]]]
    k = versions.index("1.5")
    assert 0 < k and set(versions[:k]) == {"1.4"} and set(versions[k:]) == {"1.5"}, versions
    assert all(m["model"]["labels"] == FULL["labels"] for m in data[devices[1]])

    changes = [m for d, m, _ in live.of("state") if m.get("model_change")]
    assert len(changes) == 1, changes
    change = changes[0]
    assert change["level"] == change["prev_level"]
    assert change["model"] == {**FULL, "version": "1.5"}
    # Every state message that is not a change of model changes the level.
    assert all(m["level"] != m["prev_level"] for d, m, _ in live.of("state")
               if not m.get("model_change"))


def test_tail_and_status_show_each_devices_model(stack):
    need_sim()
    if not CLI:
        pytest.skip("EM_CLI must name the edgemon-cli binary (run through ctest)")
    broker = stack.broker()
    prefix = f"t{uuid.uuid4().hex[:6]}"
    url = f"mqtt://127.0.0.1:{broker.port}"
    r = run_sim(broker.port, "--devices", "2", "--rate", "5", "--duration", "2", "--prefix",
                prefix, "--model", "1-2:mobilenet:1.4:variant=full,site=lab", "--switch", "2:1:1.5")
    assert r.returncode == 0, r.stderr
    # What the broker retains of each device: its birth, status and latest state, which for
    # the second one is its change of model.
    r = subprocess.run([CLI, "tail", "--broker", url, "--device", f"{prefix}-*", "--color",
                        "never", "--duration", "2"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    births = [x for x in lines if " birth: " in x]
    assert len(births) == 2, lines
    assert all(x.rstrip().endswith("model mobilenet 1.4 (site=lab, variant=full)") for x in births)
    changes = [x for x in lines if "model now" in x]
    assert len(changes) == 1 and f"{prefix}-0002" in changes[0], changes
    assert "model now mobilenet 1.5 (site=lab, variant=full) (level unchanged)" in changes[0]

    r = subprocess.run([CLI, "status", "--broker", url, "--device", f"{prefix}-*", "--wait", "0",
                        "--json"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    got = {d["device"]: d["model"] for d in json.loads(r.stdout)["devices"]}
    assert got == {f"{prefix}-0001": FULL, f"{prefix}-0002": {**FULL, "version": "1.5"}}
    r = subprocess.run([CLI, "status", "--broker", url, "--device", f"{prefix}-*", "--wait", "0",
                        "--color", "never"], capture_output=True, text=True, timeout=20)
    header, *rows = r.stdout.splitlines()
    assert header.split()[:4] == ["DEVICE", "ONLINE", "LEVEL", "MODEL"]
    assert [row.split()[:5] for row in rows] == [
        [f"{prefix}-0001", "no", "-", "mobilenet", "1.4"],
        [f"{prefix}-0002", "no", "NOMINAL", "mobilenet", "1.5"]], r.stdout
