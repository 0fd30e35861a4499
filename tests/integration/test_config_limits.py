"""The agent's config at its limits, run as the real binary: every budget section the file may
have ([budget.<stage>] up to the limit, and [budget.process]), each giving every rule of its
section, is more rules than a file may give. `--check` refuses it with one message on the
first rule past the limit (it does not crash), one stage section more is refused on its
header, and a running agent sent SIGHUP with that file keeps running on its config.

The sections' keys, which of them are rules (those with a `<rule>_level` key) and the limit
come from docs/CONFIG.md, whose tables test_config_keys checks against the agent's schema.
"""

import re
import signal
from pathlib import Path

import pytest

from conftest import wait_for
from test_shared_parsers import agent_check

CONFIG_MD = Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md"
SECTIONS = {"budget.<stage>": "## [budget.&lt;stage&gt;]", "budget.process": "## [budget.process]"}


def section_keys(section):
    """(key, type) of every key of a section's table in docs/CONFIG.md, in table order."""
    text = CONFIG_MD.read_text()
    body = text.split(SECTIONS[section] + "\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in body.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows += [(k, cells[1]) for k in re.findall(r"`([a-z0-9_]+)`", cells[0])]
    assert rows, f"no key table under {SECTIONS[section]}"
    return rows


def max_rules():
    m = re.search(r"At most (\d+) rules \(`EM_CONFIG_MAX_RULES`\)", CONFIG_MD.read_text())
    assert m, "docs/CONFIG.md states the rule limit"
    return int(m.group(1))


def value_for(kind):
    """A value every key of this type in the budget tables accepts."""
    if kind.startswith("duration"):
        return "1h"
    if kind.startswith("number"):
        return "0.5"
    if kind.startswith("size"):
        return "1GiB"
    if kind.startswith("stage names"):
        return "a, b"
    if kind == "`on`":
        return "on"
    if "`WARN`" in kind:
        return "WARN"
    raise AssertionError(f"no value for the type {kind!r}")


def every_rule(n_stages):
    """The body of a file: n_stages stage sections and the process section, every key of each.
    Returns (text after the [target] lines, the line of each rule, each stage header's line)."""
    lines, rule_lines, headers = [], [], []
    first = 3  # agent_check's [target] and pid lines come first.
    sections = [f"budget.s{i}" for i in range(n_stages)] + ["budget.process"]
    for name in sections:
        schema = "budget.process" if name == "budget.process" else "budget.<stage>"
        keys = section_keys(schema)
        names = {k for k, _ in keys}
        lines.append(f"[{name}]")
        if schema == "budget.<stage>":
            headers.append(first + len(lines) - 1)
        for key, kind in keys:
            lines.append(f"{key} = {value_for(kind)}")
            if f"{key}_level" in names:
                rule_lines.append(first + len(lines) - 1)
    return "\n".join(lines) + "\n", rule_lines, headers


def problems(stderr):
    return [line for line in stderr.splitlines() if re.match(r".*\.ini:\d+: ", line)]


@pytest.mark.parametrize("extra", [0, 1])
def test_every_rule_of_every_budget_section_is_refused_cleanly(tmp_path, extra):
    limit = max_rules()
    body, rule_lines, headers = every_rule(limit + extra)
    stage_rules = sum(1 for k, _ in section_keys("budget.<stage>")
                      if k + "_level" in {n for n, _ in section_keys("budget.<stage>")})
    assert len(rule_lines) > limit * stage_rules  # the process rules too
    r = agent_check(tmp_path, body)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])  # not 139 (SIGSEGV)
    cfg = tmp_path / "agent.ini"
    want = [f"{cfg}:{rule_lines[limit]}: more than {limit} budget rules in the file"]
    if extra:
        want.insert(0, f"{cfg}:{headers[limit]}: more than {limit} [budget.<stage>] sections")
    assert problems(r.stderr) == want, r.stderr[-2000:]


def test_reload_of_every_rule_keeps_the_agent_and_its_config(stack):
    _, _, agent, sub = stack.watching()
    sub.next("birth")
    valid = agent.config.read_text()
    body, rule_lines, _ = every_rule(max_rules())
    agent.config.write_text(valid + body)
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "the running config stays" in agent.log_text(), 10, "the reload refused")
    log = agent.log_text()
    line = rule_lines[max_rules()] - 3 + len(valid.splitlines()) + 1  # after the valid text
    assert f"{agent.config}:{line}: more than {max_rules()} budget rules" in log, log[-2000:]
    assert agent.proc.poll() is None, "the agent must survive the reload"
    first = sub.next("data")
    sub.next("data", pred=lambda m: m["seq"] > first["seq"])  # still sampling and publishing
    # The file fixed, the next SIGHUP applies it.
    agent.config.write_text(valid)
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload: 0 budget rules" in agent.log_text(), 10, "the reload applied")
    assert agent.proc.poll() is None
