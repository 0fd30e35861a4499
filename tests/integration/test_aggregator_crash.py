"""edgemon-aggregator survives kill -9 mid-ingest: a real mosquitto, edgemon-sim publishing 20
devices at 20 Hz, and the aggregator writing SQLite. After SIGKILL the next start says the last
run did not stop cleanly; after SIGTERM the database passes PRAGMA integrity_check, holds the
rows, and the next start does not say unclean.

The database is only ever read here through read-only connections of Python's sqlite3 module
(Debian's /usr/bin/python3), i.e. an independent SQLite reader.
"""

import os
import signal
import sqlite3
import subprocess

import pytest

from conftest import free_port, signal_stop, wait_for

AGGREGATOR = os.environ.get("EM_AGGREGATOR")
SIM = os.environ.get("EM_SIM")

UNCLEAN = "did not stop cleanly"


class Aggregator:
    def __init__(self, tmp, broker_port, db, name):
        self.args = [AGGREGATOR, "--broker", f"mqtt://127.0.0.1:{broker_port}", "--db", str(db),
                     "--http", f"127.0.0.1:{free_port()}", "--batch-ms", "200",
                     "--batch-rows", "500"]
        self.log_path = tmp / f"aggregator-{name}.log"
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        if self.proc is None:
            return None
        rc = signal_stop(self.proc, sig, 20, f"aggregator did not stop within 20 s of signal {sig}")
        self.log.close()
        return rc


def query(db, sql):
    """One value from a read-only connection; None while the table does not exist yet."""
    if not db.exists():
        return None
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = con.execute(sql).fetchone()
            return row[0] if row else None
        finally:
            con.close()
    except sqlite3.OperationalError:
        return None


def killed(proc):
    """A cleanup for stack.on_stop: SIGKILL proc (a Popen) when it still runs."""
    def cleanup():
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return cleanup


def start_aggregator(stack, port, db, name):
    """An aggregator killed (SIGKILL) when the test ends, once it has opened its store."""
    a = Aggregator(stack.tmp, port, db, name).start()
    stack.on_stop(lambda: a.stop(signal.SIGKILL))

    def opened():
        if not a.alive():
            pytest.fail(f"aggregator {name} exited with {a.proc.returncode}:\n{a.log_text()}")
        return "store: created" in a.log_text() or "store: opened" in a.log_text()

    wait_for(opened, 20, f"aggregator {name} to open its store")
    return a


def test_aggregator_kill9_then_restart_reports_unclean_and_db_is_intact(stack):
    if not AGGREGATOR or not SIM:
        pytest.skip("EM_AGGREGATOR and EM_SIM must name the binaries (run through ctest)")
    broker = stack.broker()
    db = stack.tmp / "history.db"

    first = start_aggregator(stack, broker.port, db, "first")
    assert UNCLEAN not in first.log_text()

    sim_log = open(stack.tmp / "sim.log", "wb")
    sim = subprocess.Popen([SIM, "--devices", "20", "--rate", "20", "--broker",
                            f"mqtt://127.0.0.1:{broker.port}", "--duration", "120"],
                           stdout=sim_log, stderr=subprocess.STDOUT)
    stack.on_stop(killed(sim))

    # Mid-ingest: committed samples from several devices are in the file, and more keep coming.
    wait_for(lambda: (query(db, "SELECT count(DISTINCT device) FROM samples") or 0) >= 5, 30,
             "samples of at least 5 devices in the database")
    before = query(db, "SELECT count(*) FROM samples")
    wait_for(lambda: (query(db, "SELECT count(*) FROM samples") or 0) > before, 30,
             "more samples to be committed")
    assert first.alive()
    first.stop(signal.SIGKILL)
    assert first.proc.returncode == -signal.SIGKILL
    rows_after_kill = query(db, "SELECT count(*) FROM samples")
    assert rows_after_kill and rows_after_kill >= before

    second = start_aggregator(stack, broker.port, db, "second")
    wait_for(lambda: UNCLEAN in second.log_text(), 10, "the restart to report the unclean stop")
    # It keeps ingesting after the restart.
    wait_for(lambda: (query(db, "SELECT count(*) FROM samples") or 0) > rows_after_kill, 30,
             "samples committed by the restarted aggregator")
    assert second.stop(signal.SIGTERM) == 0, second.log_text()

    sim.send_signal(signal.SIGTERM)
    sim.wait(20)

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        samples = con.execute("SELECT count(*) FROM samples").fetchone()[0]
        assert samples > rows_after_kill
        devices = con.execute("SELECT count(*) FROM devices WHERE name LIKE 'sim-%'").fetchone()[0]
        assert devices == 20
        assert con.execute("SELECT count(*) FROM stage_windows").fetchone()[0] > 0
        assert con.execute("SELECT value FROM meta WHERE key = 'clean'").fetchone()[0] == 1
        # Rows reference existing dictionary entries.
        assert con.execute("SELECT count(*) FROM samples WHERE device NOT IN "
                           "(SELECT id FROM devices) OR metric NOT IN "
                           "(SELECT id FROM metrics)").fetchone()[0] == 0
    finally:
        con.close()

    third = start_aggregator(stack, broker.port, db, "third")
    wait_for(lambda: "store: opened" in third.log_text(), 10, "the third start to open the store")
    assert third.stop(signal.SIGTERM) == 0, third.log_text()
    assert UNCLEAN not in third.log_text()
