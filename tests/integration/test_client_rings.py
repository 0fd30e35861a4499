"""The Python client's span rings against the real agent and mosquitto: four writer threads
accounted for span by span, and a writer that lives through an agent restart.

The writer is a separate Python process (this file run as `test_client_rings.py writer ...`)
using the edgemon package as users do; it prints its client's counters as JSON when done.
"""

import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def writer_main(socket_path, threads, per_thread, gap_us, until_rings):
    sys.path.insert(0, os.path.join(ROOT, "firmware", "client", "python"))
    import edgemon

    client = edgemon.Client(socket_path)
    # until_rings: every thread paces its spans (1 ms apart, at most 10 s) until that many rings
    # are acknowledged, so that a thread cannot finish its spans before its ring's ack arrives
    # (a slow machine, a sanitizer build); the rest go in a tight loop.
    deadline = time.monotonic() + 10

    def work(i):
        stage = "t%d" % i
        for n in range(per_thread):
            with client.span(stage, frame=n + 1):
                pass
            if gap_us:
                time.sleep(gap_us / 1e6)
            elif (until_rings and client.ring_stats()["accepted"] < until_rings
                  and time.monotonic() < deadline):
                time.sleep(0.001)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"stats": client.stats(), "rings": client.ring_stats()}), flush=True)
    os._exit(0)  # the agent learns of the exit from its pidfd and drains what is left


if __name__ == "__main__" and sys.argv[1:2] == ["writer"]:
    writer_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                int(sys.argv[6]))

from conftest import wait_for  # noqa: E402
from test_rings import values_until as last_values  # noqa: E402



def start(stack):
    broker, _, agent, sub = stack.watching()
    birth = sub.next("birth")
    path = stack.tmp / "run" / "spans.sock"
    wait_for(lambda: path.exists() and (stack.tmp / "run" / "deadlines").exists(), 5,
             "the span socket and the deadline page")
    return broker, agent, sub, birth, path


def run_writer(path, threads, per_thread, gap_us=0, until_rings=0):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "writer", str(path),
                             str(threads), str(per_thread), str(gap_us), str(until_rings)],
                            stdout=subprocess.PIPE, text=True)


def test_four_writer_threads_get_four_rings_and_every_span_is_accounted(stack):
    _, agent, sub, birth, path = start(stack)
    threads, per_thread = 4, 5000
    total = threads * per_thread
    w = run_writer(path, threads, per_thread, until_rings=threads)
    out, _ = w.communicate(timeout=60)
    assert w.returncode == 0
    report = json.loads(out)
    assert report["rings"]["accepted"] == threads  # one ring per thread, each acknowledged
    dropped = report["stats"]["dropped"]
    # While a ring's ack is pending its thread sends v1 datagrams; a tight loop of four threads
    # can fill the socket queue then (queue_full). Nothing else may be lost.
    assert dropped["no_agent"] == dropped["invalid_stage"] == dropped["other"] == 0
    # ring_stats()["written"] comes from the rings' own positions: exact. (The client's
    # datagram counters are shared by the threads without a lock: diagnostics, not a ledger.)
    in_rings = report["rings"]["written"]
    assert 0 < in_rings <= total

    def settled(v, c):
        return v["rings.active"] == 0 and v["spans.ring"] + v["spans.ring_lost.overwritten"] + \
            v["spans.ring_lost.bad_slot"] == in_rings

    v, counts = last_values(sub, birth, settled, timeout=15,
                            what="every ring span accounted for")
    assert v["spans.ring_lost.bad_slot"] == 0
    assert v["spans.ring_lost.bad_head"] == 0
    assert v["spans.ring_lost.skipped"] == 0
    assert 0 <= v["spans.datagram"] <= total - in_rings
    assert sum(counts.get("t%d" % i, 0) for i in range(threads)) == \
        v["spans.ring"] + v["spans.datagram"]
    assert agent.proc.poll() is None


def test_a_writer_registers_again_after_an_agent_restart(stack):
    _, agent, sub, birth, path = start(stack)
    per_thread = 3000  # one span about every millisecond: a few seconds of writing
    w = run_writer(path, 1, per_thread, gap_us=1000)
    v, _ = last_values(sub, birth, lambda v, c: v["rings.active"] == 1 and v["spans.ring"] > 0,
                       timeout=15, what="the ring in use")
    before = v["spans.ring"]
    assert agent.stop() == 0
    agent.start()  # the same config: a new deadline page (new inode), the same socket path
    birth2 = sub.next("birth")
    v2, _ = last_values(sub, birth2, lambda v, c: v["rings.active"] == 1, timeout=15,
                        what="the ring registered again")
    out, _ = w.communicate(timeout=60)
    assert w.returncode == 0
    report = json.loads(out)
    assert report["rings"]["accepted"] == 2  # the first agent's and the new agent's
    assert report["stats"]["dropped"]["other"] == 0
    v2, _ = last_values(sub, birth2, lambda v, c: v["rings.active"] == 0 and v["spans.ring"] > 0,
                        timeout=15, what="the final drain by the new agent")
    folded = before + v2["spans.ring"] + v2["spans.datagram"]
    lost_bound = report["rings"]["lost"]["agent_restart"]
    # The spans of the restart window are lost and counted by the client (an upper bound);
    # nothing is counted twice.
    assert folded <= per_thread
    assert folded + lost_bound + v2["spans.ring_lost.overwritten"] >= per_thread - \
        report["stats"]["dropped"]["no_agent"] - report["stats"]["sent"]
