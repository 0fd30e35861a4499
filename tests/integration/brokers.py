"""The shipped broker configuration (firmware/mosquitto/mosquitto-edgemon.conf with its ACL
edgemon.acl) on a loopback port, and the device's topics as the code states them.

The shipped file is used as is but for what ties it to a host: its TLS listener on 8883
becomes a plain listener on a free loopback port that takes usernames and passwords (a
password_file made with mosquitto_passwd), the ACL is the shipped file by path, and
persistence is off. Everything else, message_size_limit and max_packet_size included, is
the shipped text.
"""

import os
import subprocess

from conftest import ROOT, ConfBroker, free_port, make_password_file

SHIPPED_CONF = ROOT / "firmware" / "mosquitto" / "mosquitto-edgemon.conf"
ACL = ROOT / "firmware" / "mosquitto" / "edgemon.acl"
HOST_USER = "edgemon-host"  # The host-side identity in edgemon.acl.
PROTO_TOOL = os.environ.get("EM_PROTO_TOOL")

# Lines of the shipped file that name the host's paths and its TLS listener.
HOST_BOUND = ("listener", "cafile", "certfile", "keyfile", "tls_version", "require_certificate",
              "use_identity_as_username", "acl_file", "persistence", "persistence_location",
              "autosave_interval", "persistent_client_expiration")


def shipped_conf_text():
    """The shipped configuration's lines that hold anywhere (comments dropped)."""
    kept = []
    for line in SHIPPED_CONF.read_text().splitlines():
        words = line.split()
        if words and not line.startswith("#") and words[0] not in HOST_BOUND:
            kept.append(line)
    return "\n".join(kept) + "\n"


def shipped_setting(name):
    """The value of `name` in the shipped configuration (an int)."""
    for line in SHIPPED_CONF.read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == name:
            return int(words[1])
    raise AssertionError(f"{name} is not set in {SHIPPED_CONF}")


def shipped_broker(things, tmp_path, users):
    """mosquitto with the shipped configuration and ACL; users = {name: password}."""
    passwd = make_password_file(tmp_path / "passwd", users)
    port = free_port()
    b = ConfBroker(tmp_path, shipped_conf_text() + (
        f"persistence false\nacl_file {ACL}\npassword_file {passwd}\n"
        f"listener {port} 127.0.0.1\n"), port)
    b.start()
    things.append(b)
    return b


def topics():
    """The device's topics from edgemon/proto.h's table (em-proto-tool topics): (the suffixes
    the agent publishes, {command suffix the host publishes: its command number})."""
    assert PROTO_TOOL, "EM_PROTO_TOOL must name em-proto-tool"
    out = subprocess.run([PROTO_TOOL, "topics"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    rows = [line.split() for line in out.splitlines()]
    agent = [suffix for who, suffix, _, _ in rows if who == "agent"]
    host = {suffix: int(command) for who, suffix, _, command in rows if who == "host"}
    assert len(agent) + len(host) == len(rows) and agent and host, out
    return agent, host
