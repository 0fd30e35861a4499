"""The config readers built on common/'s schema, run as the real binaries with --check.

- the aggregator's [aggregator] section and its flags: a misspelt key gets the closest key's
  name, an empty path is refused, values out of a row's range are refused with the row's words,
  and the defaults the rows give pass --check;
- the agent: a misspelt key in a budget section gets the closest key of that section, and a
  duration with an unknown unit names every unit the shared parser accepts;
- the agent's reload (SIGHUP) warns about the first changed key the schema marks as not
  reloadable, and about nothing when the file did not change.
Only the reload test needs a broker (a real mosquitto): --check never connects.
"""

import signal

import pytest

from conftest import wait_for
from test_shared_parsers import agent_check, aggregator_check as aggregator


def test_aggregator_defaults_pass_check():
    r = aggregator()
    assert r.returncode == 0, r.stderr
    assert "broker mqtt://127.0.0.1:1883, db edgemon.db, http 127.0.0.1:9108" in r.stdout


def test_aggregator_misspelt_key_gets_the_closest(tmp_path):
    cfg = tmp_path / "agg.ini"
    cfg.write_text("[aggregator]\nbatchms = 100\n")
    r = aggregator("--config", str(cfg))
    assert r.returncode == 2
    assert (f"{cfg}:2: batchms '100' is not a key of [aggregator]; did you mean 'batch_ms'?"
            in r.stderr), r.stderr


@pytest.mark.parametrize("args,words", [
    (["--db", ""], "--db '' wants a path"),
    (["--batch-ms", "0"], "--batch_ms '0' wants 1 to 60000"),
    (["--batch-rows", "10000001"], "--batch_rows '10000001' wants 1 to 10000000"),
    (["--metrics-max-bytes", "1048575"], "wants 1048576 to 1073741824 (bytes)"),
    (["--device-ttl", "soon"], "wants a duration such as 30m, 24h or 7d (0: never)"),
    (["--tls-insecure", "--broker", "mqtt://h:1:2"], "wants mqtt://HOST[:PORT]"),
])
def test_aggregator_flags_refused_with_the_rows_words(args, words):
    r = aggregator(*args)
    assert r.returncode == 2
    assert words in r.stderr, r.stderr


def test_aggregator_downsample_step_at_least_a_second(tmp_path):
    cfg = tmp_path / "agg.ini"
    cfg.write_text("[aggregator]\ndownsample_step = 500ms\n")
    r = aggregator("--config", str(cfg))
    assert r.returncode == 2
    assert "downsample_step '500ms' wants a duration of at least 1s" in r.stderr, r.stderr
    cfg.write_text("[aggregator]\ndownsample_step = 1s\nretention = 3600\n")
    assert aggregator("--config", str(cfg)).returncode == 0


def test_agent_budget_key_misspelt_gets_the_closest(tmp_path):
    r = agent_check(tmp_path, "[budget.infer]\np99 = 40ms\np99_levle = WARN\n")
    assert r.returncode == 1
    assert "unknown key 'p99_levle' in [budget.infer]; did you mean 'p99_level'?" in r.stderr, \
        r.stderr


def test_agent_unknown_unit_lists_every_unit(tmp_path):
    r = agent_check(tmp_path, "[agent]\nsample_period = 10fortnights\n")
    assert r.returncode == 1
    assert "has an unknown unit; use ns, us, ms, s, m, h or d" in r.stderr, r.stderr
    assert agent_check(tmp_path, "[agent]\nsample_period = 1d\n").returncode == 1  # > 60s
    assert agent_check(tmp_path, "[spans]\nstage_idle = 1d\n").returncode == 0


def test_agent_reload_warns_about_keys_it_cannot_apply(stack):
    _, _, agent, sub = stack.watching()
    sub.next("birth")

    def reload(count):
        agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: agent.log_text().count("reload: 0 budget rules") >= count, 10,
                 f"reload {count}")

    reload(1)  # The same file: nothing to warn about.
    assert "takes a restart" not in agent.log_text(), agent.log_text()
    # [mqtt] stays last in the file: qos_data goes there; [degrade] enter_windows reloads.
    agent.config.write_text(agent.config.read_text() + "qos_data = 1\n[degrade]\nenter_windows = 4\n")
    reload(2)
    log = agent.log_text()
    assert "reload: [mqtt] qos_data changed; that takes a restart" in log, log
    assert "enter_windows changed" not in log
    assert agent.proc.poll() is None
