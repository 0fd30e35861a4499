"""edgemon-aggregator keeps what it was delivered: a persistent MQTT session and idempotent rows.

A real mosquitto on a loopback port, the real aggregator and a paho publisher at QoS 1 that
stands for the devices (data messages built from proto/vectors/data_basic.cbor with their
session and seq rewritten). While the aggregator is away (SIGKILL) the broker queues the
messages for its session; a restart with the same client id stores every one of them once. A
data message delivered twice (same device, session and seq) is one row and counted in
edgemon_aggregator_duplicates_total. An aggregator under another client id does not get the
queue: the session is what carries it. With the queue and persistence settings of the shipped
broker config (firmware/mosquitto/mosquitto-edgemon.conf) the queue also survives a broker
restart.

The database is read through read-only connections of Python's sqlite3 module.
"""

import re
import signal
import sqlite3

import pytest

from conftest import ROOT, Aggregator, ConfBroker, free_port, mqtt_client, wait_for
from test_aggregator import rows as query

DATA = (ROOT / "proto" / "vectors" / "data_basic.cbor").read_bytes()
# data_basic.cbor: a map whose key 3 (session) is a 4-byte uint and key 4 (seq) the uint 42.
SESSION_AT = DATA.index(bytes.fromhex("031adeadbeef"))
SEQ_AT = DATA.index(bytes.fromhex("04182a"))
assert SESSION_AT < SEQ_AT


def cbor_uint(n):
    """The shortest CBOR encoding of an unsigned integer below 2^32 (major type 0)."""
    if n < 24:
        return bytes([n])
    if n < 0x100:
        return bytes([0x18, n])
    if n < 0x10000:
        return bytes([0x19]) + n.to_bytes(2, "big")
    return bytes([0x1a]) + n.to_bytes(4, "big")


def data_msg(session, seq):
    """data_basic.cbor with its session and seq replaced."""
    out = bytearray(DATA[:SESSION_AT])
    out += bytes([0x03, 0x1a]) + session.to_bytes(4, "big")
    out += DATA[SESSION_AT + 6:SEQ_AT]
    out += bytes([0x04]) + cbor_uint(seq)
    out += DATA[SEQ_AT + 3:]
    return bytes(out)




def stored(db, device):
    """[(session, seq)] of the device's data rows."""
    try:
        return query(db, "SELECT d.session, d.seq FROM data d JOIN devices v ON v.id = d.device "
                         "WHERE v.name = ? ORDER BY d.session, d.seq", device)
    except sqlite3.OperationalError:
        return []  # The schema is not there yet.


def duplicates(agg):
    status, body = agg.get("/metrics")
    m = re.search(r"^edgemon_aggregator_duplicates_total (\d+)$", body, re.M)
    return int(m.group(1)) if status == 200 and m else None


@pytest.fixture
def run(tmp_path):
    """Starts aggregators on one database (each run with its own log) and stops what is left."""
    started = []

    def start(port, client_id=None, run_name="run", extra=()):
        ident = ("--client-id", client_id) if client_id else ()
        a = Aggregator(tmp_path, port, name="agg", extra_args=(*ident, *extra))
        a.log_path = tmp_path / f"agg-{run_name}-{len(started)}.log"
        started.append(a)
        return a.start()

    yield start
    for a in started:
        a.stop(signal.SIGKILL)


def publish_all(port, device, messages, kind="data", tls=None):
    """Publishes each payload at QoS 1 on edgemon/v1/<device>/<kind> (not retained) and waits
    for every PUBACK. tls: as conftest.mqtt_client() takes it."""
    c = mqtt_client(port, tls=tls)
    try:
        infos = [c.publish(f"edgemon/v1/{device}/{kind}", m, qos=1) for m in messages]
        for info in infos:
            info.wait_for_publish(10)
            assert info.is_published(), "the broker did not acknowledge a QoS 1 publish"
    finally:
        c.loop_stop()
        c.disconnect()


N = 300


def test_restarted_aggregator_stores_what_the_broker_queued_once(stack, run):
    broker = stack.broker()
    db = stack.tmp / "agg.db"
    first = run(broker.port)  # The default client id: host name and database.
    client_id = re.search(r"mqtt: connected to \S+ as (\S+) \(persistent session\)",
                          first.log_text()).group(1)
    assert client_id.startswith("edgemon-aggregator-")
    first.stop(signal.SIGKILL)

    publish_all(broker.port, "dev-q", [data_msg(7, seq) for seq in range(N)])

    second = run(broker.port)
    assert f" as {client_id} " in second.log_text(), "the default client id is not stable"
    wait_for(lambda: len(stored(db, "dev-q")) >= N, 30, f"{N} queued data messages stored")
    # A live message after the queue: once it is stored, everything before it was handled.
    publish_all(broker.port, "dev-q", [data_msg(7, N)])
    wait_for(lambda: (7, N) in stored(db, "dev-q"), 30, "the live message stored")
    assert stored(db, "dev-q") == [(7, seq) for seq in range(N + 1)]


def test_same_device_session_and_seq_is_one_row_and_counted(stack, run):
    broker = stack.broker()
    db = stack.tmp / "agg.db"
    agg = run(broker.port)
    wait_for(lambda: duplicates(agg) == 0, 10, "the duplicates counter at 0")
    publish_all(broker.port, "dev-d", [data_msg(9, 5), data_msg(9, 5)])
    wait_for(lambda: duplicates(agg) == 1, 10, "edgemon_aggregator_duplicates_total 1")
    wait_for(lambda: stored(db, "dev-d") == [(9, 5)], 10, "the first delivery stored")
    windows = query(db, "SELECT count(*) FROM stage_windows")[0][0]
    # Another session's seq 5 and the next seq are messages of their own.
    publish_all(broker.port, "dev-d", [data_msg(10, 5), data_msg(9, 6)])
    wait_for(lambda: len(stored(db, "dev-d")) == 3, 10, "the two other messages stored")
    assert stored(db, "dev-d") == [(9, 5), (9, 6), (10, 5)]
    assert duplicates(agg) == 1
    assert windows > 0
    assert query(db, "SELECT count(*) FROM stage_windows")[0][0] == 3 * windows


def test_another_client_id_does_not_get_the_queue(stack, run):
    broker = stack.broker()
    db = stack.tmp / "agg.db"
    run(broker.port, client_id="agg-owner").stop(signal.SIGKILL)
    publish_all(broker.port, "dev-c", [data_msg(3, seq) for seq in range(50)])

    other = run(broker.port, client_id="agg-other")
    publish_all(broker.port, "dev-c", [data_msg(3, 1000)])
    wait_for(lambda: (3, 1000) in stored(db, "dev-c"), 30, "the live message stored")
    assert stored(db, "dev-c") == [(3, 1000)], "a new session got another session's queue"
    other.stop()

    # The queue was the owner's session's all along.
    run(broker.port, client_id="agg-owner")
    wait_for(lambda: len(stored(db, "dev-c")) == 51, 30, "the owner's queue stored")
    assert stored(db, "dev-c") == [(3, seq) for seq in range(50)] + [(3, 1000)]


SHIPPED = ROOT / "firmware" / "mosquitto" / "mosquitto-edgemon.conf"
QUEUE_KEYS = ("max_queued_messages", "max_queued_bytes", "max_inflight_messages", "persistence",
              "autosave_interval", "persistent_client_expiration")


def test_shipped_queue_settings_keep_the_queue_across_a_broker_restart(stack, run):
    """The queue and persistence lines of the shipped broker config, on a plain loopback
    listener: the aggregator is away, the broker is restarted (a clean stop saves its
    database), and the aggregator still gets every queued message."""
    lines = [ln for ln in SHIPPED.read_text().splitlines() if ln.split(" ")[0] in QUEUE_KEYS]
    assert {ln.split(" ")[0] for ln in lines} == set(QUEUE_KEYS)
    port = free_port()
    conf = (f"listener {port} 127.0.0.1\nallow_anonymous true\n" + "\n".join(lines) +
            f"\npersistence_location {stack.tmp}/\n")
    broker = ConfBroker(stack.tmp, conf, port).start()
    try:
        db = stack.tmp / "agg.db"
        run(port, client_id="agg-persist").stop(signal.SIGKILL)
        publish_all(port, "dev-r", [data_msg(5, seq) for seq in range(100)])
        broker.stop()  # SIGTERM: mosquitto saves sessions and queues to persistence_location.
        broker = ConfBroker(stack.tmp, conf, port).start()
        run(port, client_id="agg-persist")
        wait_for(lambda: len(stored(db, "dev-r")) == 100, 30, "the queue kept by the broker")
        assert stored(db, "dev-r") == [(5, seq) for seq in range(100)]
    finally:
        broker.stop()
