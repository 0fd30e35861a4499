"""The shipped broker ACL (firmware/mosquitto/edgemon.acl) lets every topic of a device through.

A real mosquitto runs the shipped configuration and ACL (brokers.py) with a password file made
by mosquitto_passwd. The topics come from the code's own table (edgemon/proto.h's
em_proto_topic(), printed by em-proto-tool topics), never from a list typed here: every kind the
agent publishes, sent by the device's user at QoS 1, must reach the host's user, and every
command the agent subscribes to, sent by the host's user, must reach the device's user. mosquitto
acknowledges a publish the ACL refuses and drops it, so only the receiving end can tell. Then
the real agent, logged in as its device, publishes every one of those kinds through the broker
(flight and profile on cmd/flight and cmd/profile), and the host receives each.
"""

import queue
import time

import cbor2
import pytest

from brokers import HOST_USER, shipped_broker, topics
from conftest import Agent, Target, mqtt_client

DEVICE = "jetson-07"


class Inbox:
    """The topics a paho client receives under `pattern`, with their payloads."""

    def __init__(self, client, pattern):
        self.q = queue.Queue()
        self.seen = {}
        client.on_message = lambda c, u, m: self.q.put((m.topic, m.payload))
        got = queue.Queue()
        client.on_subscribe = lambda c, u, mid, granted: got.put(granted)
        client.subscribe(pattern, qos=1)
        assert got.get(timeout=10)[0] != 0x80, f"subscription to {pattern} refused"

    def wait_all(self, wanted, timeout):
        """Collects until every topic in `wanted` came or timeout; returns the missing ones."""
        deadline = time.monotonic() + timeout
        while set(wanted) - set(self.seen) and time.monotonic() < deadline:
            try:
                topic, payload = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.setdefault(topic, payload)
        return sorted(set(wanted) - set(self.seen))


@pytest.fixture
def broker(things, tmp_path):
    users = {HOST_USER: "host-secret", DEVICE: "device-secret"}
    return shipped_broker(things, tmp_path, users), users


def test_every_topic_of_the_table_passes_the_shipped_acl(things, broker):
    b, users = broker
    agent_topics, host_topics = topics()
    host = mqtt_client(b.port, username=HOST_USER, password=users[HOST_USER])
    device = mqtt_client(b.port, username=DEVICE, password=users[DEVICE])
    things += [host, device]
    host_in = Inbox(host, "edgemon/v1/#")
    device_in = Inbox(device, f"edgemon/v1/{DEVICE}/cmd/#")

    for suffix in agent_topics:
        device.publish(f"edgemon/v1/{DEVICE}/{suffix}", b"\xa0", qos=1).wait_for_publish()
    for suffix in host_topics:
        host.publish(f"edgemon/v1/{DEVICE}/{suffix}", b"\xa0", qos=1).wait_for_publish()

    missing = host_in.wait_all([f"edgemon/v1/{DEVICE}/{s}" for s in agent_topics], 10)
    assert not missing, f"the shipped ACL drops what the device publishes on {missing}"
    missing = device_in.wait_all([f"edgemon/v1/{DEVICE}/{s}" for s in host_topics], 10)
    assert not missing, f"the shipped ACL drops the host's commands on {missing}"


def test_the_agent_gets_every_kind_through_the_shipped_acl(things, broker, tmp_path):
    b, users = broker
    agent_topics, host_topics = topics()
    host = mqtt_client(b.port, username=HOST_USER, password=users[HOST_USER])
    things.append(host)
    inbox = Inbox(host, f"edgemon/v1/{DEVICE}/#")

    cred = tmp_path / "device.cred"
    cred.write_text(f"username = {DEVICE}\npassword = {users[DEVICE]}\n")
    cred.chmod(0o600)
    target = Target().start()
    things.append(target)
    agent = Agent(tmp_path, b.port, f"cmdline = {target.marker}", device=DEVICE,
                  extra=(f"credentials_file = {cred}\n"
                         "[flight]\npre_seconds = 1s\npost_seconds = 1s\n"
                         "[profile]\nseconds = 1s\nunwind = fp\n"))
    agent.start()
    things.append(agent)
    assert not inbox.wait_all([f"edgemon/v1/{DEVICE}/birth"], 15), agent.log_text()[-3000:]

    # Every command of the table, as the host sends it.
    for suffix, command in host_topics.items():
        cmd = cbor2.dumps({0: 1, 1: 4, 2: time.time_ns(), 4: command})
        host.publish(f"edgemon/v1/{DEVICE}/{suffix}", cmd, qos=1).wait_for_publish()

    wanted = [f"edgemon/v1/{DEVICE}/{s}" for s in agent_topics]
    missing = inbox.wait_all(wanted, 30)
    assert not missing, f"nothing reached the host on {missing}:\n{agent.log_text()[-3000:]}"
    log = agent.log_text()
    assert "ignoring" not in log, log[-3000:]
