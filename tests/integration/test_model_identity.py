"""Model identity end to end: the Python client's set_model -> the real agent -> mosquitto.

The birth, every data window and every state message carry the identity the client named; a
change of identity is one retained state message marked model_change (level == prev_level); the switch to the
light variant on DEGRADED is visible per window; bad input is dropped and counted on the client
and never raises; a restarted agent learns the identity again from the client alone; hostile
model datagrams from a raw socket are counted by the agent, which keeps running.
"""

import os
import re
import socket
import struct
import sys
import time

import edgemon_proto
import pytest
from conftest import Subscriber, wait_for
from edgemon_proto import encode_rebirth
from test_rings import start_agent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "firmware", "client", "python"))
import edgemon  # noqa: E402

# Hold DEGRADED for the whole test once a hard miss raised it (100 clean windows to leave).
BUDGET = ("[budget.infer]\ndeadline = 50ms\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 200ms\nenter_windows = 1\nleave_windows = 100\n")
FULL = {"name": "mobilenet_v3_small", "version": "1.4", "labels": {"site": "lab", "variant": "full"}}
LIGHT = dict(FULL, labels={"site": "lab", "variant": "light"})


def start(stack, extra=BUDGET):
    """Broker port, agent, subscriber, birth and span socket path (test_rings.start_agent)."""
    agent, sub, birth, path = start_agent(stack, extra)
    port = int(re.search(r"mqtt://127\.0\.0\.1:(\d+)", agent.config.read_text()).group(1))
    return port, agent, sub, birth, path


def is_change(model):
    """A state message that is this change of model (not a change of level)."""
    return lambda m: (m.get("model_change") is True and m["level"] == m["prev_level"] and
                      m.get("model") == model)


def values(sub, birth, pred, what):
    """The values by name of the first data message whose values satisfy pred."""
    def step():
        v = edgemon_proto.values_by_name(sub.next("data"), birth)
        return v if pred(v) else None
    return wait_for(step, 10, what)


def test_the_identity_is_in_birth_data_and_state_and_a_switch_is_one_retained_state(stack):
    port, agent, sub, birth, path = start(stack)
    assert "model" not in birth  # nothing named yet
    client = edgemon.Client(str(path))
    assert client.set_model("mobilenet_v3_small", "1.4", variant="full", site="lab") is True

    change = sub.next("state", pred=is_change(FULL))
    assert change["level"] == "NOMINAL"
    assert change["reason"] == "model: mobilenet_v3_small 1.4 (site=lab, variant=full)"
    data = sub.next("data", pred=lambda d: "model" in d)
    assert data["model"] == FULL
    sub.publish(f"edgemon/v1/{agent.device}/cmd/rebirth", encode_rebirth(time.time_ns()))
    assert sub.next("birth")["model"] == FULL
    assert "model: mobilenet_v3_small 1.4 (site=lab, variant=full)" in agent.log_text()

    # A hard miss: the level change carries the identity too.
    client.record("infer", time.monotonic_ns(), 120_000_000)
    degraded = sub.next("state", pred=lambda m: m["level"] == "DEGRADED")
    assert degraded["prev_level"] == "NOMINAL" and degraded["model"] == FULL

    # The app switches to its light model on DEGRADED: one state message, level unchanged.
    client.set_model("mobilenet_v3_small", "1.4", variant="light", site="lab")
    light = sub.next("state", pred=lambda m: m.get("model") == LIGHT)
    assert (light["level"], light["prev_level"]) == ("DEGRADED", "DEGRADED")
    assert light["reason"] == "model: mobilenet_v3_small 1.4 (site=lab, variant=light)"
    # From then on every window says which variant produced it.
    data = sub.next("data", pred=lambda d: d.get("model") == LIGHT)
    assert data["level"] == "DEGRADED"
    v = values(sub, birth, lambda v: v["model.changes"] == 2, "two changes counted")
    # The client's first look at the deadline page (a new agent to it) sent the identity
    # once more: received counts datagrams, changes only the differing ones.
    assert v["model.received"] >= 2 and v["model.refused"] == 0
    for _ in range(3):
        assert sub.next("data")["model"] == LIGHT

    # The same identity again (a re-send) changes nothing; the count of datagrams moves.
    received = v["model.received"]
    client.set_model("mobilenet_v3_small", "1.4", site="lab", variant="light")
    v = values(sub, birth, lambda v: v["model.received"] == received + 1, "the repeat received")
    assert v["model.changes"] == 2

    # A subscriber that comes later gets the retained state: the current identity.
    late = Subscriber(port, agent.device)
    try:
        kept = late.next("state")
        assert kept["_retain"] and kept["model"] == LIGHT
    finally:
        late.close()
    client.close()
    assert agent.proc.poll() is None


def test_bad_labels_and_names_are_dropped_and_counted_never_raised(stack):
    _, agent, sub, birth, path = start(stack, extra="")
    client = edgemon.Client(str(path))
    # Invalid keys (a dash, a leading digit, a leading "__", too long), an empty value, a value
    # that is not text, a non-ASCII value: each dropped; the two good labels go through.
    with pytest.warns(RuntimeWarning, match="set_model"):  # once per client, then counts only
        ok = client.set_model("resnet18", "2", variant="full", **{
            "bad-key": "x", "1st": "x", "__reserved": "x", "k" * 16: "x"},
            empty="", number=3, accent="caf\u00e9", site="lab")
    assert ok is True
    m = client.stats()["model"]
    assert (m["invalid_label"], m["invalid_model"], m["labels_over_limit"]) == (7, 0, 0)
    assert client.model == ("resnet18", "2", {"site": "lab", "variant": "full"})
    want = {"name": "resnet18", "version": "2", "labels": {"site": "lab", "variant": "full"}}
    assert sub.next("data", pred=lambda d: "model" in d)["model"] == want

    # A bad name or version drops the whole call: the agent keeps the identity it has.
    assert client.set_model("", "2") is False
    assert client.set_model("x" * 64, "2") is False
    assert client.set_model("resnet18", "tab\there") is False
    assert client.set_model(None, 2) is False
    # More than 8 valid labels: the first 8 kept, the rest counted.
    nine = {"l%d" % i: "v" for i in range(9)}
    assert client.set_model("resnet34", "1", **nine) is True
    m = client.stats()["model"]
    assert (m["invalid_model"], m["labels_over_limit"], m["calls"]) == (4, 1, 6)
    got = sub.next("data", pred=lambda d: d.get("model", {}).get("name") == "resnet34")
    assert got["model"]["labels"] == {"l%d" % i: "v" for i in range(8)}
    v = values(sub, birth, lambda v: v["model.changes"] == 2, "two identities")
    assert v["model.received"] == client.stats()["model"]["sent"]  # dropped calls never left
    assert agent.proc.poll() is None


def test_a_restarted_agent_learns_the_identity_again_from_the_client(stack):
    _, agent, sub, birth, path = start(stack, extra="")
    client = edgemon.Client(str(path))
    client.set_model("yolo_n", "8.1", variant="full")
    want = {"name": "yolo_n", "version": "8.1", "labels": {"variant": "full"}}
    sub.next("state", pred=is_change(want))
    assert agent.stop() == 0
    agent.start()  # a new deadline page (new inode), the same socket path
    birth2 = sub.next("birth")
    assert "model" not in birth2  # the new agent knows nothing yet
    # The application only goes on timing its frames; its client's once-a-second agent check
    # sees the new agent and sends the identity again.
    deadline = time.monotonic() + 10
    got = None
    while got is None and time.monotonic() < deadline:
        with client.span("infer"):
            pass
        try:
            got = sub.next("state", timeout=0.05, pred=is_change(want))
        except BaseException:  # pytest's fail() on the short timeout: keep going
            got = None
    assert got is not None, "the new agent never learnt the identity"
    assert sub.next("data", pred=lambda d: "model" in d)["model"] == want
    assert client.stats()["model"]["sent"] >= 2


MODEL_HEAD = struct.Struct("<2sBBIIB3s64s32s")


def datagram(n=1, labels=((b"variant", b"full"),), head=b"EM\x02\x07", name=b"m",
             version=b"1", reserved=b"\0\0\0", tail=bytes(16)):
    buf = bytearray(512)
    buf[0:4] = head
    MODEL_HEAD.pack_into(buf, 0, head[:2], head[2], head[3], os.getpid(), 1, n, reserved, name,
                         version)
    for i, (k, v) in enumerate(labels):
        struct.pack_into("<16s32s", buf, 112 + 48 * i, k, v)
    buf[496:512] = tail
    return bytes(buf)


def test_hostile_model_datagrams_are_counted_and_the_agent_keeps_running(stack):
    _, agent, sub, birth, path = start(stack, extra="")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.connect(str(path))
    good = datagram()
    sizes = [bytes(100), good[:511], good + b"\0", good * 2]
    bad = [
        datagram(head=b"EM\x01\x07"),  # version 1
        datagram(head=b"EM\x02\x08"),  # kind 8
        datagram(n=9),  # too many labels
        datagram(reserved=b"\0\x01\0"),  # reserved byte
        datagram(tail=b"\x01" + bytes(15)),  # reserved tail
        datagram(n=0),  # a label in an unused slot
        datagram(name=b""),  # empty name
        datagram(name=b"tab\there"),  # not printable
        datagram(labels=((b"__x", b"1"),)),  # reserved key prefix
        datagram(labels=((b"variant", b""),)),  # empty value
        datagram(n=2, labels=((b"variant", b"1"), (b"site", b"2"))),  # keys not ascending
        datagram(n=2, labels=((b"site", b"1"), (b"site", b"2"))),  # a key twice
    ]
    for d in sizes + bad:
        s.send(d)
    v = values(sub, birth, lambda v: v["model.refused"] == len(bad), "every bad one refused")
    assert v["spans.dropped.size"] == len(sizes)
    assert v["model.received"] == 0 and v["model.changes"] == 0
    assert "model" not in sub.next("data")
    # The agent still takes a good one after all that.
    s.send(good)
    d = sub.next("data", pred=lambda d: "model" in d)
    assert d["model"] == {"name": "m", "version": "1", "labels": {"variant": "full"}}
    s.close()
    assert agent.proc.poll() is None
