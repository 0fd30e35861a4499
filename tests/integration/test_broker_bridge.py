"""A site broker bridged to the central broker (firmware/mosquitto/bridge-site.conf, with its
address and TLS lines replaced by a loopback port): the agent publishes to its site broker,
the aggregator subscribes to the central one, and the central broker goes away for a while.

- Every data message of the session reaches the aggregator's SQLite through the bridge, the
  ones published while the central broker was down included (the site broker queued them on
  the bridge's persistent session): no gap.
- A rebirth request published on the central broker comes down the bridge to the agent.
"""

import re
import sqlite3
import time

from conftest import ROOT, ConfBroker, free_port, mqtt_client, wait_for

SHIPPED = ROOT / "firmware" / "mosquitto" / "bridge-site.conf"


def bridge_conf(central_port):
    """The shipped bridge with a loopback address and no TLS (the only lines replaced)."""
    lines = []
    for line in SHIPPED.read_text().splitlines():
        key = line.split(" ", 1)[0]
        if key == "address":
            line = f"address 127.0.0.1:{central_port}"
        elif key.startswith("bridge_") or key in ("persistence", "persistence_location",
                                                   "autosave_interval"):
            continue  # TLS files of a real site; queues in memory for the test.
        lines.append(line)
    return "\n".join(lines) + "\n"


def session_seqs(db, device):
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            return c.execute("SELECT d.session, d.seq FROM data d JOIN devices v ON v.id = "
                             "d.device WHERE v.name = ? ORDER BY 1, 2", (device,)).fetchall()
    except sqlite3.OperationalError:
        return []


def test_bridged_site_broker_delivers_every_sequence_number_across_a_central_outage(stack,
                                                                                      tmp_path):
    central_port, site_port = free_port(), free_port()
    store = tmp_path / "central-store"
    store.mkdir()
    # Persistence: the aggregator's session outlives the central broker's restart (saved at
    # its SIGTERM), so what the bridge flushes before the aggregator is back is kept for it.
    central = ConfBroker(tmp_path, f"listener {central_port} 127.0.0.1\nallow_anonymous true\n"
                         "max_queued_messages 100000\npersistence true\n"
                         f"persistence_location {store}/\n", central_port)
    stack_started = [central.start()]
    site = ConfBroker(tmp_path, f"listener {site_port} 127.0.0.1\nallow_anonymous true\n"
                      + bridge_conf(central_port), site_port)
    stack_started.append(site.start())
    try:
        agg = stack.aggregator(central_port)
        target = stack.target()
        agent = stack.agent(site_port, f"cmdline = {target.marker}", extra="qos_data = 1\n")
        wait_for(lambda: len(session_seqs(agg.db, agent.device)) >= 10, 20,
                 "data through the bridge")
        central.stop()  # SIGTERM; the bridge keeps retrying, the site queues.
        time.sleep(4)  # ~40 data messages published to the site broker meanwhile.
        central.start()
        before = len(session_seqs(agg.db, agent.device))
        wait_for(lambda: len(session_seqs(agg.db, agent.device)) >= before + 60, 30,
                 "the queued messages and live data after the outage")
        rows = session_seqs(agg.db, agent.device)
        assert len({s for s, _ in rows}) == 1  # One agent process: one session.
        seqs = [q for _, q in rows]
        assert seqs == list(range(seqs[0], seqs[-1] + 1)), "a gap in the session"
        # The agent itself never lost the site broker: nothing went to its spool.
        assert "no PUBACK" not in agent.log_text()
        assert "lost" not in re.sub(r"spool\.lost", "", agent.log_text())

        # Down the bridge: a host's rebirth request on the central broker reaches the agent.
        cmd = (ROOT / "proto" / "vectors" / "cmd_rebirth.cbor").read_bytes()
        host = mqtt_client(central_port)
        try:
            host.publish(f"edgemon/v1/{agent.device}/cmd/rebirth", cmd,
                         qos=1).wait_for_publish(10)
        finally:
            host.loop_stop()
            host.disconnect()
        wait_for(lambda: "rebirth requested" in agent.log_text(), 15,
                 "the rebirth request through the bridge")
    finally:
        for b in reversed(stack_started):
            b.stop()
