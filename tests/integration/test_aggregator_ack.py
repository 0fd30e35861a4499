"""edgemon-aggregator acknowledges a QoS 1 message only once its rows are committed.

A real mosquitto on a loopback port, the real aggregator on a persistent session (a fixed
client id) and real QoS 1 traffic: edgemon-sim at --qos 1, or a paho publisher with messages
built from proto/vectors/. The aggregator runs with a long batch (--batch-ms 5000), so that a
message acknowledged as soon as it was read would still sit in an open transaction when the
aggregator is killed: that message would be gone, as the broker forgets what it saw
acknowledged. Here every test kills (SIGKILL) or breaks the aggregator mid-stream, restarts it
on the same database and session, and checks that the database holds every message.

One test runs the session over TLS with client certificates and the shipped ACL (the
acknowledge-after loop reads and writes through libmosquitto's TLS layer itself).

The last test makes the commit fail for real: a file size limit (RLIMIT_FSIZE, set on the
running aggregator with prlimit) makes SQLite's writes to the WAL fail, so COMMIT fails; the
messages of those batches must not be acknowledged, and a restart without the limit stores them.

The database is read through read-only connections of Python's sqlite3 module.
"""

import os
import re
import resource
import shutil
import signal
import subprocess
import uuid

import pytest

from conftest import ROOT, ConfBroker, Pki, free_port, wait_for
from test_aggregator import rows as query
from test_aggregator_persistence import data_msg, publish_all, run, stored  # noqa: F401

SIM = os.environ.get("EM_SIM")
LONG_BATCH = ("--batch-ms", "5000", "--batch-rows", "1000000")
STATE = (ROOT / "proto" / "vectors" / "state_degraded.cbor").read_bytes()


def metric(agg, name):
    """The value of an unlabelled counter of the aggregator's /metrics, None when absent."""
    status, body = agg.get("/metrics")
    m = re.search(rf"^edgemon_aggregator_{name} (\d+)$", body, re.M)
    return int(m.group(1)) if status == 200 and m else None


ACL = ROOT / "firmware" / "mosquitto" / "edgemon.acl"


@pytest.fixture
def aggs(run):  # noqa: F811 (the fixture imported above)
    """Aggregators on one database and one session (client id agg-ack) with a long batch."""
    return lambda port, extra=(): run(port, client_id="agg-ack", extra=(*LONG_BATCH, *extra))


def sim_seqs(db, prefix):
    """{device: [seq...]} of the data rows of devices named <prefix>-NNNN."""
    try:
        rows = query(db, "SELECT v.name, d.seq FROM data d JOIN devices v ON v.id = d.device "
                         "WHERE v.name LIKE ? ORDER BY v.name, d.seq", f"{prefix}-%")
    except Exception:
        return {}
    out = {}
    for name, seq in rows:
        out.setdefault(name, []).append(seq)
    return out


def test_sigkill_mid_stream_loses_no_qos1_message(stack, aggs):
    if not SIM:
        pytest.skip("EM_SIM must name the edgemon-sim binary (run through ctest)")
    broker = stack.broker()
    db = stack.tmp / "agg.db"
    first = aggs(broker.port)
    sim_log = stack.tmp / "sim.log"
    with open(sim_log, "wb") as log:
        sim = subprocess.Popen([SIM, "--broker", f"mqtt://127.0.0.1:{broker.port}", "--devices",
                                "4", "--rate", "25", "--duration", "8", "--qos", "1",
                                "--prefix", "ack"], stdout=log, stderr=subprocess.STDOUT)
    try:
        # Well inside the first 5 s batch: a message acknowledged on receipt is not committed.
        wait_for(lambda: (metric(first, "ingested_total") or 0) >= 200, 30,
                 "200 messages ingested by the first aggregator")
        first.stop(signal.SIGKILL)
        aggs(broker.port)
        assert sim.wait(60) == 0, sim_log.read_text(errors="replace")
    finally:
        if sim.poll() is None:
            sim.kill()
            sim.wait(10)
    m = re.search(r"(\d+) data, \d+ birth", sim_log.read_text(errors="replace"))
    published = int(m.group(1))
    assert published >= 400

    def complete():
        seqs = sim_seqs(db, "ack")
        return sum(len(v) for v in seqs.values()) >= published and seqs

    try:
        seqs = wait_for(complete, 60, f"all {published} data messages stored")
    except pytest.fail.Exception:
        seqs = sim_seqs(db, "ack")
        n = sum(len(v) for v in seqs.values())
        pytest.fail(f"{published - n} of {published} data messages acknowledged to the broker "
                    f"are not in the database after the kill")
    assert sorted(seqs) == [f"ack-{i:04d}" for i in range(1, 5)]
    for device, got in seqs.items():
        assert got == list(range(len(got))), f"{device}: a gap or a repeat in its seqs"
    assert sum(len(v) for v in seqs.values()) == published


def test_repeated_state_message_is_one_level_change_and_counted(stack, aggs):
    broker = stack.broker()
    db = stack.tmp / "agg.db"
    agg = aggs(broker.port)
    wait_for(lambda: metric(agg, "duplicates_total") == 0, 10, "the duplicates counter at 0")
    publish_all(broker.port, "dev-s", [STATE, STATE], kind="state")
    wait_for(lambda: metric(agg, "duplicates_total") == 1, 10,
             "edgemon_aggregator_duplicates_total 1")
    assert query(db, "SELECT count(*) FROM level_changes")[0][0] == 1
    # The same change after a restart (an agent's write-ahead replay) is still one row.
    agg.stop(signal.SIGKILL)
    again = aggs(broker.port)
    publish_all(broker.port, "dev-s", [STATE], kind="state")
    wait_for(lambda: metric(again, "duplicates_total") == 1, 10,
             "the replayed state counted as a duplicate")
    assert query(db, "SELECT l.level, l.prev_level, l.rule FROM level_changes l JOIN devices v "
                     "ON v.id = l.device WHERE v.name = 'dev-s'") == [(2, 0, "infer.p99")]


def test_sigkill_over_tls_loses_no_qos1_message(stack, aggs, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    pki = Pki(tmp_path / "pki")
    crt, key = pki.issue("broker", san="IP:127.0.0.1,DNS:localhost")
    host_crt, host_key = pki.issue("edgemon-host")
    device = f"tls-{uuid.uuid4().hex[:8]}"
    dev = (pki.ca_crt, *pki.issue(device))
    port = free_port()
    broker = ConfBroker(tmp_path, (
        f"per_listener_settings false\nallow_anonymous false\npersistence false\n"
        f"max_queued_messages 100000\nacl_file {ACL}\nlistener {port} 127.0.0.1\n"
        f"cafile {pki.ca_crt}\ncertfile {crt}\nkeyfile {key}\ntls_version tlsv1.2\n"
        "require_certificate true\nuse_identity_as_username true\n"), port).start()
    try:
        db = stack.tmp / "agg.db"
        tls_args = ("--broker", f"mqtts://127.0.0.1:{port}", "--tls-ca-file", str(pki.ca_crt),
                    "--tls-cert-file", str(host_crt), "--tls-key-file", str(host_key))
        first = aggs(port, tls_args)
        publish_all(port, device, [data_msg(6, seq) for seq in range(150)], tls=dev)
        wait_for(lambda: (metric(first, "ingested_total") or 0) >= 100, 30,
                 "100 messages ingested over TLS")
        first.stop(signal.SIGKILL)
        publish_all(port, device, [data_msg(6, seq) for seq in range(150, 300)], tls=dev)
        aggs(port, tls_args)
        try:
            wait_for(lambda: len(stored(db, device)) >= 300, 30, "all 300 messages stored")
        except pytest.fail.Exception:
            pytest.fail(f"{300 - len(stored(db, device))} of 300 messages acknowledged over TLS "
                        f"are not in the database after the kill")
        assert stored(db, device) == [(6, seq) for seq in range(300)]
    finally:
        broker.stop()


def test_failed_commit_does_not_acknowledge(stack, aggs):
    broker = stack.broker()
    db = stack.tmp / "agg.db"
    first = aggs(broker.port)
    publish_all(broker.port, "dev-f", [data_msg(4, seq) for seq in range(50)])
    wait_for(lambda: len(stored(db, "dev-f")) == 50, 30, "the first 50 messages stored")
    assert metric(first, "store_errors_total") == 0

    # From here on no file of the aggregator may grow past one byte: SQLite's writes to the
    # WAL fail (EFBIG), so every COMMIT fails and rolls back.
    resource.prlimit(first.proc.pid, resource.RLIMIT_FSIZE, (1, 1))
    publish_all(broker.port, "dev-f", [data_msg(4, seq) for seq in range(50, 150)])
    wait_for(lambda: (metric(first, "store_errors_total") or 0) > 0, 30,
             "a failed commit counted in edgemon_aggregator_store_errors_total")
    assert first.proc.poll() is None, "the aggregator died on the file size limit"
    assert len(stored(db, "dev-f")) == 50, "a batch committed past the file size limit"
    first.stop(signal.SIGKILL)

    # Restarted without the limit on the same session: the broker still holds the messages of
    # the failed commits, as nobody acknowledged them.
    aggs(broker.port)
    try:
        wait_for(lambda: len(stored(db, "dev-f")) >= 150, 30, "all 150 messages stored")
    except pytest.fail.Exception:
        pytest.fail(f"{150 - len(stored(db, 'dev-f'))} messages whose commit failed were "
                    f"acknowledged and are lost")
    assert stored(db, "dev-f") == [(4, seq) for seq in range(150)]
