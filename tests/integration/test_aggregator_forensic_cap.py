"""The total bounds of forensic storage: a real edgemon-aggregator behind a real mosquitto keeps
the flight recordings, and the stack profiles, of all devices within --flight-total-max-bytes
and --profile-total-max-bytes, the oldest received going first whichever device sent them.

Fifty devices take turns publishing recordings and profiles, each one received after the one
before it (one connection, QoS 1) but timed earlier by its device, so that an order by device
time would keep the opposite end. What the store keeps is computed here from the sizes
published: the longest run of the latest received whose bytes fit the bound, per kind (the
other kind's bound is its own). The store's rows, /metrics
(edgemon_aggregator_forensic_{bytes,max_bytes,stored_total,evicted_total}) and /healthz must
all say that; a restart with a lower bound holds from the next recording."""

import re
import sqlite3
import time

import cbor2

from conftest import ROOT, Aggregator, mqtt_client, wait_for
from test_flight_host import big_recording

DEVICES = [f"cap-{i:04d}" for i in range(50)]
FLIGHT_ROUNDS = 3   # recordings per device, ~8 KB each
PROFILE_ROUNDS = 12  # profiles per device, ~0.5 KB each
FLIGHT_CAP = 512 * 1024
PROFILE_CAP = 256 * 1024  # the least the flag takes: one largest profile


def published(port, items):
    """Publishes (topic, payload) in order on one QoS 1 connection."""
    c = mqtt_client(port, client_id="forensic-cap-pub")
    for topic, payload in items:
        c.publish(topic, payload, qos=1).wait_for_publish(5)
    c.loop_stop()
    c.disconnect()


def make_items():
    """[(topic, payload, kind, key, size)] in publish order: round by round, device by device,
    each later one timed 1 ms earlier by its device."""
    profile = cbor2.loads((ROOT / "proto" / "vectors" / "profile_basic.cbor").read_bytes())
    t0 = time.time_ns()
    items = []
    for r in range(PROFILE_ROUNDS):
        for device in DEVICES:
            t = t0 - len(items) * 10**6
            if r < FLIGHT_ROUNDS:
                m = big_recording(r, 600)
                m[2], m[3] = t, 7
                p = cbor2.dumps(m)
                items.append((f"edgemon/v1/{device}/flight", p, "flight", (device, 7, r), len(p)))
            m = dict(profile)
            m[2], m[3], m[4] = t, 7, r
            p = cbor2.dumps(m)
            items.append((f"edgemon/v1/{device}/profile", p, "profile", (device, 7, r), len(p)))
    return items


def kept_of(items, kind, cap):
    """The keys of `kind` the bound keeps: the longest run of the latest received that fits."""
    kept, total = [], 0
    for _, _, k, key, size in reversed(items):
        if k != kind:
            continue
        if total + size > cap:
            break
        kept.append(key)
        total += size
    return set(kept), total


def stored(db, table):
    """{(device, session, number)} of the store's table, and its forensic_bytes row."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = set(con.execute(f"SELECT d.name, t.session, t.number FROM {table} t"
                               " JOIN devices d ON d.id = t.device"))
        total = con.execute("SELECT bytes FROM forensic_bytes WHERE kind = ?", (table,)).fetchone()
        return rows, total[0]
    finally:
        con.close()


def figures(agg):
    """{family{labels}: value} of the forensic families on /metrics."""
    status, body = agg.get("/metrics")
    assert status == 200
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r"^(edgemon_aggregator_forensic_\w+\{[^}]*\}) (\d+)$", body, re.M)}


def f(name, kind, reason=None):
    return (f'edgemon_aggregator_forensic_{name}{{kind="{kind}"'
            + (f',reason="{reason}"' if reason else "") + "}")


def healthz_figures(agg):
    status, body = agg.get("/healthz")
    assert status == 200
    lines = body.splitlines()
    assert lines[0] == "ok", body
    m = re.fullmatch(r"forensics: flight (\d+) of (\d+) bytes, (\d+) evicted; "
                     r"profile (\d+) of (\d+) bytes, (\d+) evicted", lines[1])
    assert m and len(lines) == 2, body
    return tuple(int(x) for x in m.groups())


def test_total_bounds_keep_the_latest_received_of_all_devices(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port, extra_args=[
        "--flight-total-max-bytes", str(FLIGHT_CAP),
        "--profile-total-max-bytes", str(PROFILE_CAP)])
    items = make_items()
    n = {k: sum(1 for i in items if i[2] == k) for k in ("flight", "profile")}
    sent = {k: sum(i[4] for i in items if i[2] == k) for k in ("flight", "profile")}
    assert sent["flight"] > 2 * FLIGHT_CAP and sent["profile"] > PROFILE_CAP
    published(broker.port, [(t, p) for t, p, *_ in items])
    wait_for(lambda: figures(agg).get(f("stored_total", "flight")) == n["flight"] and
             figures(agg).get(f("stored_total", "profile")) == n["profile"], 20,
             "every recording and profile stored")
    expect = {"flight": kept_of(items, "flight", FLIGHT_CAP),
              "profile": kept_of(items, "profile", PROFILE_CAP)}
    caps = {"flight": FLIGHT_CAP, "profile": PROFILE_CAP}
    fig = figures(agg)
    for kind, table in (("flight", "flights"), ("profile", "profiles")):
        keys, total = expect[kind]
        rows, row_total = stored(agg.db, table)
        # The latest received of every device are left, whatever the devices' own times said.
        assert rows == keys
        assert len({d for d, _, _ in rows}) == len(DEVICES)
        assert row_total == total <= caps[kind]
        assert fig[f("bytes", kind)] == total
        assert fig[f("max_bytes", kind)] == caps[kind]
        assert fig[f("evicted_total", kind, "global_cap")] == n[kind] - len(keys)
        assert fig[f("evicted_total", kind, "device_cap")] == 0
    assert healthz_figures(agg) == (
        expect["flight"][1], FLIGHT_CAP, n["flight"] - len(expect["flight"][0]),
        expect["profile"][1], PROFILE_CAP, n["profile"] - len(expect["profile"][0]))

    # A lower bound after a restart holds from the next recording: the oldest of the kept
    # ones go, and the new one stays.
    agg.stop()
    lower = 256 * 1024
    again = Aggregator(stack.tmp, broker.port, name="agg-lower",
                       extra_args=["--flight-total-max-bytes", str(lower)])
    again.args[again.args.index("--db") + 1] = str(agg.db)
    again.start()
    try:
        m = big_recording(FLIGHT_ROUNDS, 600)
        m[2], m[3] = time.time_ns(), 7
        extra = cbor2.dumps(m)
        items.append((f"edgemon/v1/{DEVICES[0]}/flight", extra, "flight",
                      (DEVICES[0], 7, FLIGHT_ROUNDS), len(extra)))
        published(broker.port, [(items[-1][0], extra)])
        wait_for(lambda: figures(again).get(f("stored_total", "flight")) == 1, 10,
                 "the recording after the restart")
        keys, total = kept_of(items, "flight", lower)
        rows, row_total = stored(agg.db, "flights")
        assert rows == keys and (DEVICES[0], 7, FLIGHT_ROUNDS) in rows
        assert row_total == total <= lower
        fig = figures(again)
        assert fig[f("bytes", "flight")] == total
        assert fig[f("evicted_total", "flight", "global_cap")] == \
            len(expect["flight"][0]) + 1 - len(keys)
        assert healthz_figures(again)[:3] == (
            total, lower, len(expect["flight"][0]) + 1 - len(keys))
    finally:
        again.stop()
