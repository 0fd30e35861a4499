"""Stack profiles on the host: the golden vectors and edgemon-sim --flights --profiles publish
stack profiles (edgemon/v1/<device>/profile) through a real mosquitto into a real
edgemon-aggregator, which stores them and serves them (GET /api/devices/<id>/profiles[/<key>]);
edgemon-cli profile reads them back.

Every expectation is computed here from the bytes published, decoded with cbor2 and
edgemon_proto.decode_profile independently of the C codec: the list's fields, newest first,
each entry's link to the flight recording of the same session and cause within 1 s (and the
flight entry's link back), the JSON route, the CBOR byte for byte. Replays must be stored once,
payloads that do not decode counted and not stored, bad parameters answered 400 naming them."""

import functools
import json
import os
import subprocess
import time

import pytest

import forensics
from conftest import ROOT, broker_and_aggregator, edgemon_proto, wait_for
from forensics import (Capture, by_device, check_refusals, check_replays, get_raw, key_of, metric,
                       simulate)

SIM = os.environ.get("EM_SIM")
CLI = os.environ.get("EM_CLI")
DEVICES = ["pr-0001", "pr-0002"]
GOLD = "pr-gold"
VECTORS = ["profile_basic", "profile_command", "profile_truncated"]
LEVELS = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"]


publish = functools.partial(forensics.publish, kind="profile")
api_list = functools.partial(forensics.api_list, kind="profiles")


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """(broker, aggregator, {device: [(cbor, raw map)]} of profiles, same of flights)."""
    assert SIM and CLI, "EM_SIM and EM_CLI must name the binaries (run through ctest)"
    tmp = tmp_path_factory.mktemp("profiles")
    with broker_and_aggregator(tmp) as (broker, agg):
        cap = Capture(broker.port, "profile", "flight")
        time.sleep(0.2)
        try:
            n = simulate(broker.port, 2, "pr", 9, "--flights", "--profiles")["profile"]
            assert n > 0
            gold = [(ROOT / "proto" / "vectors" / f"{v}.cbor").read_bytes() for v in VECTORS]
            publish(broker.port, GOLD, *gold)
            wait_for(lambda: len(cap.got["profile"]) == n + len(gold), 10, "every profile")
            out = {kind: by_device(cap.got[kind]) for kind in ("profile", "flight")}
            assert set(out["profile"]) == set(DEVICES + [GOLD])

            def stored():
                return sum(len(api_list(agg, d)) if agg.get(f"/api/devices/{d}/profiles")[0] == 200
                           else 0 for d in out["profile"])
            wait_for(lambda: stored() == n + len(gold), 10, "every profile in the aggregator")
            yield broker, agg, out["profile"], out["flight"]
        finally:
            cap.stop()


def linked(m, others):
    """Key of the blob in others [(cbor, raw map)] of the same session and cause whose time is
    within 1 s of m's, the nearest (then the lowest number), or None."""
    near = [(abs(o[2] - m[2]), o[4]) for _, o in others
            if o[3] == m[3] and o[5][0] == m[5][0] and abs(o[2] - m[2]) <= 10**9]
    return f"{m[3]}-{min(near)[1]}" if near else None


def expected_entry(device, payload, m, flights):
    p = edgemon_proto.decode_profile(payload)
    t = p["trigger"]
    cut = p.get("truncated", {})
    return {
        "key": key_of(m), "session": p["session"], "number": p["number"],
        "time_ns": p["time_ns"], "cause": t["cause"], "level": t["level"],
        "prev_level": t.get("prev_level"), "rule": t.get("rule"), "stage": t.get("stage"),
        "reason": t.get("reason"), "start_mono_ns": p["start_mono_ns"],
        "duration_ns": p["duration_ns"], "hz": p["hz"], "clock": p["clock"],
        "samples": p["samples"], "lost": p["lost"], "stages": len(p["stages"]),
        "frames": len(p["frames"]), "stacks": len(p["stacks"]),
        "truncated": {"stacks_cut": cut.get("stacks_cut", 0),
                      "samples_cut": cut.get("samples_cut", 0)},
        "historical": p.get("historical", False), "bytes": len(payload),
        "flight": linked(m, flights.get(device, [])),
        "url": f"/api/devices/{device}/profiles/{key_of(m)}",
    }


def test_profiles_are_listed_newest_first_with_fields_from_the_cbor(host):
    _, agg, profiles, flights = host
    for device, recs in profiles.items():
        listed = api_list(agg, device)
        # Newest first; of equal times the last stored first (the golden vectors share one).
        want = [expected_entry(device, payload, m, flights)
                for payload, m in sorted(reversed(recs), key=lambda r: r[1][2], reverse=True)]
        for e in listed:
            assert e.pop("recv_ns") > 0
        assert listed == want
    newest = api_list(agg, DEVICES[0])[0]["time_ns"]
    assert len(api_list(agg, DEVICES[0], "?limit=1")) == 1
    assert api_list(agg, DEVICES[0], f"?since={newest + 1}") == []
    assert all(e["time_ns"] < newest for e in api_list(agg, DEVICES[0], f"?until={newest}"))


def test_flights_and_profiles_of_one_excursion_link_each_other(host):
    _, agg, profiles, flights = host
    links = 0
    for device in DEVICES:
        for e in api_list(agg, device, kind="flights"):
            payload, m = next(r for r in flights[device] if key_of(r[1]) == e["key"])
            assert e["profile"] == linked(m, profiles[device])
            links += e["profile"] is not None
    assert links > 0  # the simulator publishes both at each excursion's start
    assert all(e["flight"] is None for e in api_list(agg, GOLD))


def test_json_is_the_decoded_profile_and_cbor_what_was_published(host):
    _, agg, profiles, _ = host
    for device, recs in profiles.items():
        for payload, m in recs:
            path = f"/api/devices/{device}/profiles/{key_of(m)}"
            assert get_raw(agg, path + "?format=cbor") == (200, "application/cbor", payload)
            status, ctype, body = get_raw(agg, path)
            assert (status, ctype) == (200, "application/json")
            assert json.loads(body) == edgemon_proto.decode_profile(payload)


def test_replays_are_stored_once_and_bad_payloads_counted_not_stored(host):
    broker, agg, profiles, _ = host
    device = DEVICES[1]
    payload, m = profiles[device][0]
    bad_hz = dict(m)
    bad_hz[8] = 5000
    bad_stack = dict(m)
    bad_stack[14] = [[1, 0, None, len(m[13]) // 3 + 7]]  # a frame index past the table
    check_replays(broker, agg, device, payload, m, kind="profile", historical_key=17,
                  bad=[bad_hz, bad_stack])


def test_api_refuses_bad_parameters_and_unknown_names(host):
    _, agg, profiles, _ = host
    device = DEVICES[0]
    key = key_of(profiles[device][0][1])
    check_refusals(agg, device, key, kind="profiles",
                   list_queries=[("?limit=0", "limit"), ("?limit=x", "limit"),
                                 ("?since=-1", "since"), ("?since=5&until=5", "since"),
                                 ("?bogus=1", "bogus"), ("?limit=1&limit=2", "limit")],
                   entry_queries=[("?format=xml", "format"), ("?x=1", "x")])


def cli(*args):
    return subprocess.run([CLI, "profile", *args], capture_output=True, text=True, timeout=30)


def test_cli_json_is_the_api_and_list_lists_them(host):
    _, agg, _, _ = host
    url = f"http://127.0.0.1:{agg.port}"
    for device in DEVICES + [GOLD]:
        listed = api_list(agg, device)
        r = cli("--aggregator", url, "--device", device, "--json")
        assert r.returncode == 0, r.stderr
        status, body = agg.get(f"/api/devices/{device}/profiles/{listed[0]['key']}")
        assert json.loads(r.stdout) == json.loads(body)
        r = cli("--aggregator", url, "--device", device, "--list")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith(f"{len(listed)} profile")
        assert [line.split()[0] for line in lines[2:]] == [e["key"] for e in listed]
        r = cli("--aggregator", url, "--device", device, "--list", "--json")
        assert json.loads(r.stdout)["profiles"] == json.loads(
            agg.get(f"/api/devices/{device}/profiles?limit=5000")[1])["profiles"]
