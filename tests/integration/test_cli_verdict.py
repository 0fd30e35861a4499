"""edgemon-cli and the breach's verdict (state key 15, flight key 16).

`flight` prints a recording's verdict first, above the trigger and the frames, and in --json
as "verdict"; `tail` prints a level change's top causes on the lines under it, and in --json
the whole verdict; `decode` prints it in the message's JSON. The recordings and state messages
are the golden vectors, and cbor2-written twins with more causes and figures than tail shows.
"""

import json
import os
import re
import subprocess
import time

import cbor2

from conftest import ROOT

CLI = os.environ.get("EM_CLI")
VECTORS = ROOT / "proto" / "vectors"


def cli(*args, timeout=30, **kw):
    assert CLI, "EM_CLI must name the edgemon-cli binary (run through ctest)"
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, **kw)


def want_json(name):
    return json.loads((VECTORS / f"{name}.json").read_text())


CAUSE_LINE = re.compile(r"^ +(\d)\. (\S+(?: \S+)?) +(\d+)%  (.*)$")


def causes(lines):
    """(rank, cause, percent, rest) of each cause line."""
    return [CAUSE_LINE.match(ln).groups() for ln in lines if CAUSE_LINE.match(ln)]


def test_flight_prints_the_verdict_first_then_the_trigger_and_the_frames():
    r = cli("flight", "--file", str(VECTORS / "flight_verdict.cbor"), "--top", "2",
            env={"EDGEMON_AGGREGATOR": "http://127.0.0.1:9"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("flight recording ")
    assert lines[1] == ("infer p99 61.2 ms against 26.0 ms over 12 NOMINAL windows "
                        "(+35.2 ms):")
    got = causes(lines[2:6])
    assert [(g[0], g[1], g[2]) for g in got] == [
        ("1", "cpu contention", "81"), ("2", "unexplained", "10"), ("3", "more work", "9"),
        ("4", "memory pressure", "0")]
    assert got[0][3] == ("runq delay 28.4 ms/frame, involuntary switches 41/frame, "
                         "cpus online 4; ran: stress-ng (4122) 92%, kworker/u8:2 (801) 5%")
    assert got[2][3] == ("cpu ms per frame delta 3.1; grew: sgemm_ +6 pts, "
                         "im2col_cpu +1.5 pts")
    first = {name: next(i for i, ln in enumerate(lines) if ln.startswith(name))
             for name in ("trigger:", "slowest ")}
    assert 6 < first["trigger:"] < first["slowest "]


def test_flight_without_a_verdict_prints_as_before():
    r = cli("flight", "--file", str(VECTORS / "flight_basic.cbor"), "--top", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith("trigger:") and not causes(lines)
    assert "NOMINAL window" not in r.stdout


def test_flight_json_carries_the_verdict():
    r = cli("flight", "--file", str(VECTORS / "flight_verdict.cbor"), "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got == want_json("flight_verdict")
    assert got["verdict"]["causes"][0]["processes"][0] == {"pid": 4122, "comm": "stress-ng",
                                                           "share": 0.92}
    assert "verdict" not in json.loads(cli("flight", "--file", str(VECTORS / "flight_basic.cbor"),
                                           "--json").stdout)


def test_decode_prints_the_verdict_of_a_state_and_of_a_recording():
    for name in ("state_verdict", "flight_verdict"):
        r = cli("decode", str(VECTORS / f"{name}.cbor"))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == want_json(name)


def big_state():
    """state_verdict with six causes (one of a code this reader does not know), the first with
    five figures and five processes."""
    raw = cbor2.loads((VECTORS / "state_verdict.cbor").read_bytes())
    first = {0: 0, 1: 0.5, 2: {f"figure_{i}_ms": i + 0.5 for i in range(5)},
             3: [[100 + i, f"noisy-{i}", 0.1] for i in range(5)]}
    rest = [{0: code, 1: 0.1 - i / 100, 2: {"n": i}} for i, code in enumerate((7, 200, 5, 4, 3))]
    raw[15][5] = [first, *rest]
    return cbor2.dumps(raw)


def test_tail_prints_the_top_causes_under_the_level_change(stack):
    import paho.mqtt.client as mqtt
    broker = stack.broker()
    plain = (VECTORS / "state_degraded.cbor").read_bytes()
    explained = (VECTORS / "state_verdict.cbor").read_bytes()
    outs = {}
    for mode in ("text", "json"):
        args = ["tail", "--broker", f"mqtt://127.0.0.1:{broker.port}", "--device", "why-*",
                "--count", "3", "--color", "never"] + (["--json"] if mode == "json" else [])
        proc = subprocess.Popen([CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(1.0)
        c = mqtt.Client(client_id=f"it-why-{mode}")
        c.connect("127.0.0.1", broker.port)
        c.loop_start()
        for device, payload in (("why-1", plain), ("why-2", explained), ("why-3", big_state())):
            c.publish(f"edgemon/v1/{device}/state", payload, qos=1).wait_for_publish()
            time.sleep(0.2)  # one after the other, in this order
        out, err = proc.communicate(timeout=20)
        c.loop_stop()
        c.disconnect()
        assert proc.returncode == 0, err
        outs[mode] = out

    lines = outs["text"].splitlines()
    starts = [i for i, ln in enumerate(lines) if re.match(r"\d\d:\d\d:\d\d\.\d{3} +why-", ln)]
    assert [lines[i].split()[1] for i in starts] == ["why-1", "why-2", "why-3"], lines
    under = [lines[a + 1:b] for a, b in zip(starts, starts[1:] + [len(lines)])]
    assert under[0] == []  # no verdict, nothing under the change
    head = " " * 13 + "infer p99 61.2 ms against 26.0 ms over 12 NOMINAL windows (+35.2 ms):"
    assert under[1][0] == head
    got = causes(under[1])
    assert [(g[0], g[1], g[2]) for g in got] == [
        ("1", "cpu contention", "81"), ("2", "unexplained", "10"), ("3", "more work", "9")]
    assert under[1][-1].strip() == "(1 more cause)"
    # At most three figures and three processes each, the rest counted.
    first = causes(under[2])[0]
    assert first[1:3] == ("cpu contention", "50")
    assert first[3] == ("figure 0 0.5 ms, figure 1 1.5 ms, figure 2 2.5 ms, +2; ran: noisy-0 "
                        "(100) 10%, noisy-1 (101) 10%, noisy-2 (102) 10%, +2")
    assert [g[1] for g in causes(under[2])] == ["cpu contention", "unexplained", "cause 200"]
    assert under[2][-1].strip() == "(3 more causes)"

    objs = [json.loads(ln) for ln in outs["json"].splitlines()]
    assert [o["device"] for o in objs] == ["why-1", "why-2", "why-3"]
    assert "verdict" not in objs[0]["message"]
    assert objs[1]["message"] == want_json("state_verdict")
    assert len(objs[2]["message"]["verdict"]["causes"]) == 6
