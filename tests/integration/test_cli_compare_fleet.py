"""edgemon-cli compare --fleet against a real mosquitto, a real edgemon-aggregator and
edgemon-sim cohorts of known behaviour, backfilled (history published at once) so each test
has tens of minutes of device-windows in seconds."""

import json
import os
import subprocess
import time

import pytest

from conftest import broker_and_aggregator, free_port, wait_for

CLI = os.environ.get("EM_CLI")
SIM = os.environ.get("EM_SIM")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    assert CLI and SIM, "EM_CLI and EM_SIM must name the binaries (run through ctest)"
    with broker_and_aggregator(tmp_path_factory.mktemp("fleet")) as (broker, agg):
        yield broker, agg


def sim(broker, prefix, n, seconds, *args, rate=1):
    r = subprocess.run([SIM, "-n", str(n), "-r", str(rate), "-p", prefix, "-b",
                        f"mqtt://127.0.0.1:{broker.port}", "--backfill", str(seconds), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def stored(agg, prefix, windows):
    """Waits until the aggregator holds `windows` windows of devices prefix-*."""
    def count():
        _, body = agg.get(f"/api/cohort?select=model=det&device={prefix}-*")
        return json.loads(body).get("windows", 0) >= windows
    wait_for(count, 30, f"{windows} windows of {prefix}-* in the aggregator")


def fleet(agg, *args):
    p = subprocess.run([CLI, "compare", "--fleet", "--aggregator",
                        f"http://127.0.0.1:{agg.port}", *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    return p


def fleet_json(agg, *args):
    p = fleet(agg, "--json", *args)
    assert p.returncode in (0, 1), p.stderr
    doc = json.loads(p.stdout)
    return p.returncode, doc, {s["name"]: s for s in doc["stages"]}


def cohorts(n_a, n_b, *extra):
    """--model rules: devices 1..n_a run det 1.4, the next n_b det 1.5; no excursions unless
    extra says so."""
    return ["--model", f"1-{n_a}:det:1.4", "--model", f"{n_a + 1}-{n_a + n_b}:det:1.5",
            "--excursion-mean", "1e6", *extra]


def test_ten_percent_slower_cohort_is_regressed(stack):
    broker, agg = stack
    sim(broker, "slow", 8, 1200, *cohorts(4, 4, "--slow", "5-8:1.1"))
    stored(agg, "slow", 8 * 1200)
    code, doc, st = fleet_json(agg, "--a", "version=1.4", "--b", "version=1.5",
                               "--device", "slow-*")
    assert code == 1
    infer = st["infer"]
    assert infer["verdict"] == "regressed" and doc["verdict"] == "regressed"
    assert 7 < infer["change_pct"] < 13
    assert infer["ci_low_ns"] > 0 and infer["p"] < 0.01
    assert infer["a"]["devices"] == 4 and infer["b"]["devices"] == 4
    # 1200 s of 4 devices: 20 minutes each, a 21st when the history does not start on a minute.
    assert 80 <= infer["a"]["units"] <= 84
    # The table says so too, and --metric mean agrees.
    p = fleet(agg, "--a", "version=1.4", "--b", "version=1.5", "--device", "slow-*")
    assert p.returncode == 1 and p.stdout.rstrip().endswith("verdict: regressed")
    code, _, st = fleet_json(agg, "--a", "version=1.4", "--b", "version=1.5",
                             "--device", "slow-*", "--metric", "mean", "--stage", "infer")
    assert code == 1 and list(st) == ["infer"] and 8 < st["infer"]["change_pct"] < 12


def test_identical_cohorts_are_no_difference_in_19_of_20_seeds(stack):
    broker, agg = stack
    for seed in range(20):
        sim(broker, f"fp{seed}", 6, 600, "--seed", str(seed + 100), *cohorts(3, 3), rate=0.5)
    stored(agg, "fp19", 6 * 300)
    same = 0
    verdicts = []
    for seed in range(20):
        code, doc, st = fleet_json(agg, "--a", "version=1.4", "--b", "version=1.5",
                                   "--device", f"fp{seed}-*", "--stage", "infer")
        verdicts.append(st["infer"]["verdict"])
        same += st["infer"]["verdict"] == "no significant difference" and code == 0
    print("false positives:", 20 - same, verdicts)
    assert same >= 19, verdicts


def test_cohort_that_degrades_more_often_is_reported(stack):
    broker, agg = stack
    sim(broker, "deg", 8, 1800, "--model", "1-4:det:1.4", "--model", "5-8:det:1.5",
        "--excursion-mean", "600", "--degrade", "5-8:15")
    stored(agg, "deg", 8 * 1800)
    code, doc, _ = fleet_json(agg, "--a", "version=1.4", "--b", "version=1.5",
                              "--device", "deg-*")
    assert code == 1
    dg = doc["degradation"]
    assert dg["judged"] and dg["more_often"] and dg["share_b"] > 2 * dg["share_a"]
    # The other way round it is not "more often".
    _, doc, _ = fleet_json(agg, "--a", "version=1.5", "--b", "version=1.4", "--device", "deg-*")
    assert not doc["degradation"]["more_often"]


def test_version_change_mid_run_splits_the_devices_windows(stack):
    broker, agg = stack
    # Devices 1-2 change from 1.4 to 1.5 at simulated second 600 of 1200.
    sim(broker, "sw", 4, 1200, *cohorts(2, 2, "--switch", "1-2:600:1.5"))
    stored(agg, "sw", 4 * 1200)
    _, doc, st = fleet_json(agg, "--a", "version=1.4", "--b", "version=1.5",
                            "--device", "sw-000[12]", "--min-devices", "1")
    assert doc["a"]["windows"] == 2 * 600 and doc["b"]["windows"] == 2 * 600
    a, b = st["infer"]["a"], st["infer"]["b"]
    assert a["devices"] == 2 and b["devices"] == 2
    # 1200 s of a device cover 20 or 21 epoch minutes; the minute of the change holds windows
    # of both versions and counts in both cohorts: 10 or 11 a side per device.
    assert 20 <= a["units"] <= 22 and 20 <= b["units"] <= 22
    assert 40 <= a["units"] + b["units"] <= 44


def test_too_few_devices(stack):
    broker, agg = stack
    sim(broker, "few", 2, 600, *cohorts(1, 1))
    stored(agg, "few", 2 * 600)
    code, doc, st = fleet_json(agg, "--a", "version=1.4", "--b", "version=1.5",
                               "--device", "few-*")
    assert code == 0
    assert {s["verdict"] for s in st.values()} == {"too few devices"}
    assert st["infer"]["p"] is None
    code, _, st = fleet_json(agg, "--a", "version=1.4", "--b", "version=1.5",
                             "--device", "few-*", "--min-devices", "1")
    assert st["infer"]["judged"]


def test_no_data_for_a_cohort_exits_4(stack):
    _, agg = stack
    p = fleet(agg, "--a", "version=1.4", "--b", "version=9.9")
    assert p.returncode == 4 and "cohort B" in p.stderr and "version=9.9" in p.stderr


@pytest.mark.parametrize("args", [
    ["--a", "version=1.4"],
    ["--a", "version=1.4", "--b", "nonsense"],
    ["--a", "version=1.4", "--b", "version=1.5", "--metric", "p50"],
    ["--a", "version=1.4", "--b", "version=1.5", "--unit", "5"],
    ["--a", "version=1.4", "--b", "version=1.5", "--from", "yesterday"],
    ["--a", "version=1.4", "--b", "version=1.5", "--from", "2000", "--to", "1000"],
    ["--a", "version=1.4", "--b", "version=1.5", "--alpha", "0"],
    ["--a", "version=1.4", "--b", "version=1.5", "--aggregator", "ftp://x"],
    ["--a", "version=1.4", "--b", "version=1.5", "extra.emrec"],
])
def test_bad_arguments_exit_2(stack, args):
    _, agg = stack
    p = fleet(agg, *args)
    assert p.returncode == 2, (args, p.stderr)
    assert p.stderr.startswith("edgemon-cli compare: ")


def test_aggregator_refusal_exits_2_with_its_reason(stack):
    _, agg = stack
    # More than the 7 days the API serves at once.
    p = fleet(agg, "--a", "version=1.4", "--b", "version=1.5", "--from", "1000000000",
              "--to", "1100000000")
    assert p.returncode == 2 and "refused cohort A" in p.stderr, p.stderr


def test_aggregator_down_exits_3():
    port = free_port()
    t = time.monotonic()
    p = subprocess.run([CLI, "compare", "--fleet", "--aggregator", f"http://127.0.0.1:{port}",
                        "--a", "version=1.4", "--b", "version=1.5", "--timeout", "2"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and str(port) in p.stderr
    assert time.monotonic() - t < 10


def test_help_names_every_option():
    p = subprocess.run([CLI, "compare", "--fleet", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for opt in ("--a SEL", "--b SEL", "--device", "--from", "--to", "--unit", "--stage",
                "--metric", "--threshold", "--alpha", "--min-devices", "--json",
                "--aggregator", "--timeout"):
        assert opt in p.stdout, opt
