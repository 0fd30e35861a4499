"""The agent and the host tools read the same text the same way (common/).

Each test runs the real binaries on the same input and asserts they agree, and on what:
- broker URLs, a trailing '/' included: `edgemon-agent --check` and
  `edgemon-aggregator --check` accept and refuse the same ones;
- durations: every unit the one parser knows, on an agent key and an aggregator option;
- credentials files: a private one is read by both; one readable or writable by the group or
  others, or owned by another user (when the test runs as root), is refused by the agent, the
  aggregator and edgemon-cli, each naming the file;
- PMU event names: the agent's config accepts the generic names and perf aliases that
  collect/pmu.c resolves (cs, branches, cpu-cycles, faults, ...).
Nothing here needs a broker: --check never connects, and edgemon-cli is refused before it does.
"""

import os
import subprocess

import pytest

from conftest import check_config, free_port

AGGREGATOR = os.environ.get("EM_AGGREGATOR")
CLI = os.environ.get("EM_CLI")


def agent_check(tmp_path, body):
    cfg = tmp_path / "agent.ini"
    cfg.write_text("[target]\npid = 1\n" + body)
    return check_config(cfg)


def aggregator_check(*args):
    if not AGGREGATOR:
        pytest.skip("EM_AGGREGATOR (path of edgemon-aggregator) not set")
    return subprocess.run([AGGREGATOR, *args, "--check"], capture_output=True, text=True,
                          timeout=10)


URLS = [
    ("mqtt://127.0.0.1:1883", True),
    ("mqtt://127.0.0.1:1883/", True),
    ("mqtt://localhost/", True),
    ("mqtt://[::1]:1883/", True),
    ("mqtts://127.0.0.1/", True),
    ("mqtt://127.0.0.1:1883/edgemon", False),
    ("mqtt://127.0.0.1:1883//", False),
    ("mqtt://127.0.0.1//", False),
    ("mqtt://user@127.0.0.1", False),
    ("mqtt://user:pw@127.0.0.1:1883", False),
    ("mqtt://bro ker", False),
    ("mqtt://127.0.0.1:0", False),
    ("mqtt://127.0.0.1:x", False),
    ("mqtt://[::1", False),
    ("mqtt://", False),
    ("tcp://127.0.0.1", False),
]


@pytest.mark.parametrize("url,ok", URLS)
def test_agent_and_aggregator_agree_on_broker_urls(tmp_path, url, ok):
    ca = tmp_path / "ca.crt"
    ca.write_text("not checked by --check beyond being a readable file\n")
    tls = f"tls_ca_file = {ca}\n" if url.startswith("mqtts://") else ""
    agent = agent_check(tmp_path, f"[mqtt]\nbroker = {url}\n{tls}")
    host = aggregator_check("--broker", url)
    assert (agent.returncode == 0) == ok, (url, agent.stdout, agent.stderr)
    assert (host.returncode == 0) == ok, (url, host.stdout, host.stderr)
    if not ok:
        assert f"broker '{url}'" in agent.stderr, agent.stderr
        assert f"'{url}'" in host.stderr and host.returncode == 2, host.stderr


# The same day in every unit the parser knows; the agent's stage_idle goes up to 24h.
DAY = ["86400000000000ns", "86400000000us", "86400000ms", "86400s", "1440m", "24h", "1d"]


@pytest.mark.parametrize("text", DAY)
def test_agent_and_aggregator_read_every_duration_unit(tmp_path, text):
    agent = agent_check(tmp_path, f"[spans]\nstage_idle = {text}\n")
    assert agent.returncode == 0, (text, agent.stderr)
    host = aggregator_check("--retention", text)
    assert host.returncode == 0, (text, host.stderr)


def test_agent_and_aggregator_refuse_the_same_bad_durations(tmp_path):
    for text in ["1.5h", "-1h", "1 h", "1w", "1H", "h"]:
        agent = agent_check(tmp_path, f"[spans]\nstage_idle = {text}\n")
        host = aggregator_check("--retention", text)
        assert agent.returncode != 0 and f"stage_idle '{text}'" in agent.stderr, agent.stderr
        assert host.returncode == 2 and f"'{text}'" in host.stderr, host.stderr


def credentials(path, mode, user="dev-a", password="s3cret-pw"):
    path.write_text(f"# MQTT login\nusername = {user}\npassword = {password}\n")
    os.chmod(path, mode)
    return path


def cli_status(cred):
    """edgemon-cli status against a port where no broker listens: 2 when the credentials file
    is refused (before connecting), 3 when it is read and the connection then fails."""
    if not CLI:
        pytest.skip("EM_CLI (path of edgemon-cli) not set")
    return subprocess.run([CLI, "status", "--broker", f"mqtt://127.0.0.1:{free_port()}",
                           "--credentials", str(cred), "--wait", "0"],
                          capture_output=True, text=True, timeout=20)


def test_a_private_credentials_file_is_read_by_agent_and_host_tools(tmp_path):
    cred = credentials(tmp_path / "ok.cred", 0o600)
    agent = agent_check(tmp_path, f"[mqtt]\ncredentials_file = {cred}\n")
    assert agent.returncode == 0, agent.stderr
    host = aggregator_check("--broker", "mqtt://127.0.0.1:1", "--credentials-file", str(cred))
    assert host.returncode == 0, host.stderr
    cli = cli_status(cred)
    assert cli.returncode == 3, cli.stderr  # Read; then no broker.
    for r in (agent, host, cli):
        assert "s3cret-pw" not in r.stdout + r.stderr


def refused_by_all(tmp_path, cred):
    """Runs the agent's --check, the aggregator's --check and edgemon-cli on `cred`; asserts
    each refuses it as a configuration error naming the file; returns the three results."""
    agent = agent_check(tmp_path, f"[mqtt]\ncredentials_file = {cred}\n")
    host = aggregator_check("--broker", "mqtt://127.0.0.1:1", "--credentials-file", str(cred))
    cli = cli_status(cred)
    assert agent.returncode != 0, agent.stderr
    assert host.returncode == 2, host.stderr
    assert cli.returncode == 2, cli.stderr
    for r in (agent, host, cli):
        assert str(cred) in r.stderr, r.stderr
    return agent, host, cli


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o660, 0o644])
def test_credentials_others_can_reach_are_refused_by_agent_and_host_tools(tmp_path, mode):
    cred = credentials(tmp_path / "open.cred", mode)
    for r in refused_by_all(tmp_path, cred):
        assert "group or others" in r.stderr, r.stderr
        assert "chmod 600" in r.stderr, r.stderr
        assert "s3cret-pw" not in r.stdout + r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_credentials_owned_by_another_user_are_refused_by_agent_and_host_tools(tmp_path):
    cred = credentials(tmp_path / "theirs.cred", 0o600)
    os.chown(cred, 4242, 4242)
    for r in refused_by_all(tmp_path, cred):
        assert "owned by uid 4242" in r.stderr, r.stderr


def test_agent_config_accepts_the_pmu_names_the_agent_resolves(tmp_path):
    r = agent_check(tmp_path, "[pmu]\nevents = cs, branches, cpu-cycles, faults, migrations, "
                              "idle-cycles-frontend, idle-cycles-backend\n")
    assert r.returncode == 0, r.stderr
    r = agent_check(tmp_path, "[pmu]\nevents = cs, cpu-cyclez\n")
    assert r.returncode != 0
    assert "unknown pmu event 'cpu-cyclez'" in r.stderr, r.stderr
    assert "'cs'" not in r.stderr, r.stderr
