"""MQTT payload sizes: the shipped broker limit, and clients that never read a huge message.

- The shipped configuration (firmware/mosquitto/mosquitto-edgemon.conf, run by brokers.py) sets
  message_size_limit to the largest payload the protocol allows (EM_PROTO_MAX_PAYLOAD_BYTES,
  the flight and profile caps) and max_packet_size to that plus EM_PROTO_MQTT_OVERHEAD_BYTES,
  numbers read from the C headers: the largest valid flight recording and profile
  (em-proto-tool largest) and a payload of exactly the limit reach the host; one byte more
  does not.
- On a broker without any limit (the tests' own), a 100 MiB payload on the agent's cmd/rebirth
  and on a flight topic the aggregator reads is dropped by the broker for both (each told it,
  on connect, the largest packet it takes: MQTT v5 maximum packet size): their peak RSS
  (VmHWM) does not grow by the payload, and both keep working. A command payload past
  EM_PROTO_MAX_MESSAGE_BYTES that fits the agent's packet limit is refused unread, counted
  (agent.mqtt.oversize) and logged once.
"""

import re
import subprocess
import time

import cbor2
import pytest

from brokers import HOST_USER, PROTO_TOOL, shipped_broker, shipped_setting
from conftest import ROOT, Agent, Aggregator, Broker, Target, mqtt_client, wait_for
from test_broker_acl import Inbox

HEADERS = ROOT / "proto" / "include" / "edgemon"
DEVICE = "jetson-07"
HUGE = 100 * 1024 * 1024


def header_value(header, name):
    m = re.search(rf"#define {name}\s+(\d+)u", (HEADERS / header).read_text())
    assert m, f"{name} not in {header}"
    return int(m.group(1))


MAX_PAYLOAD = header_value("proto.h", "EM_PROTO_MAX_PAYLOAD_BYTES")
OVERHEAD = header_value("proto.h", "EM_PROTO_MQTT_OVERHEAD_BYTES")
MAX_MESSAGE = header_value("proto.h", "EM_PROTO_MAX_MESSAGE_BYTES")


def largest(kind):
    p = subprocess.run([PROTO_TOOL, "largest", kind, str(MAX_PAYLOAD)], capture_output=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout


def test_the_shipped_limit_is_the_largest_kind_and_holds(things, tmp_path):
    assert MAX_PAYLOAD == max(header_value("flight.h", "EM_FLIGHT_MAX_BYTES"),
                              header_value("profile.h", "EM_PROFILE_MAX_BYTES"))
    assert shipped_setting("message_size_limit") == MAX_PAYLOAD
    assert shipped_setting("max_packet_size") == MAX_PAYLOAD + OVERHEAD
    users = {HOST_USER: "host-secret", DEVICE: "device-secret"}
    b = shipped_broker(things, tmp_path, users)
    host = mqtt_client(b.port, username=HOST_USER, password=users[HOST_USER])
    device = mqtt_client(b.port, username=DEVICE, password=users[DEVICE])
    things += [host, device]
    received = []
    host.on_message = lambda c, u, m: received.append((m.topic, len(m.payload)))
    host.subscribe(f"edgemon/v1/{DEVICE}/#", qos=1)
    time.sleep(0.3)
    sent = [("flight", largest("flight")), ("profile", largest("profile")),
            ("flight", b"\x00" * MAX_PAYLOAD), ("profile", b"\x00" * (MAX_PAYLOAD + 1))]
    for kind, payload in sent:
        device.publish(f"edgemon/v1/{DEVICE}/{kind}", payload, qos=1).wait_for_publish()
    want = [(f"edgemon/v1/{DEVICE}/{k}", len(p)) for k, p in sent[:3]]
    wait_for(lambda: len(received) >= 3, 10, "the legal payloads at the host")
    time.sleep(0.5)
    assert received == want  # Not the one past the limit.


def vm_hwm(pid):
    status = open(f"/proc/{pid}/status").read()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024


def test_a_huge_payload_is_never_read_by_the_agent_or_the_aggregator(things, tmp_path):
    broker = Broker(tmp_path).start()  # No message_size_limit: the clients' own limit holds.
    things.append(broker)
    target = Target().start()
    things.append(target)
    agent = Agent(tmp_path, broker.port, f"cmdline = {target.marker}", device=DEVICE)
    agent.start()
    things.append(agent)
    agg = Aggregator(tmp_path, broker.port).start()
    things.append(agg)
    host = mqtt_client(broker.port)
    things.append(host)
    inbox = Inbox(host, f"edgemon/v1/{DEVICE}/birth")
    assert not inbox.wait_all([f"edgemon/v1/{DEVICE}/birth"], 15), agent.log_text()[-2000:]
    wait_for(lambda: DEVICE in agg.get("/metrics")[1], 15, "the device at the aggregator")
    time.sleep(1.0)
    before = {"agent": vm_hwm(agent.proc.pid), "aggregator": vm_hwm(agg.proc.pid)}

    huge = b"\x00" * HUGE
    host.publish(f"edgemon/v1/{DEVICE}/cmd/rebirth", huge, qos=1).wait_for_publish()
    host.publish(f"edgemon/v1/{DEVICE}/flight", huge, qos=1).wait_for_publish()
    log = broker.log.name
    wait_for(lambda: open(log, errors="replace").read().count("Dropping too large outgoing PUBLISH")
             >= 2, 30, "the broker to drop the huge payloads for both clients")
    time.sleep(1.0)
    after = {"agent": vm_hwm(agent.proc.pid), "aggregator": vm_hwm(agg.proc.pid)}
    for who in before:
        assert after[who] - before[who] < HUGE // 4, (who, before[who], after[who])

    # Past any command, within the agent's packet limit: delivered, refused unread, counted.
    for _ in range(3):
        host.publish(f"edgemon/v1/{DEVICE}/cmd/rebirth", b"\x00" * (MAX_MESSAGE + 1),
                     qos=1).wait_for_publish()
    wait_for(lambda: "larger than any command" in agent.log_text(), 10, "the refusal line")
    assert agent.log_text().count("larger than any command") == 1  # Rate-limited.

    # Both still work: a rebirth request brings a birth, which the aggregator takes.
    inbox.seen.clear()
    host.publish(f"edgemon/v1/{DEVICE}/cmd/rebirth",
                 cbor2.dumps({0: 1, 1: 4, 2: time.time_ns(), 4: 1}),
                 qos=1).wait_for_publish()
    assert not inbox.wait_all([f"edgemon/v1/{DEVICE}/birth"], 10), agent.log_text()[-2000:]
    assert agg.proc.poll() is None and agent.proc.poll() is None


@pytest.fixture(autouse=True)
def _tool():
    assert PROTO_TOOL, "EM_PROTO_TOOL must name em-proto-tool"
