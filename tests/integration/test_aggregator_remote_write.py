"""edgemon-aggregator's [remote_write]: the fleet's families pushed into a real Prometheus
(Debian's 2.42 with --web.enable-remote-write-receiver --enable-feature=native-histograms),
against the exact answer and against the scrape path.

edgemon-sim publishes a fleet with a known, seeded latency distribution (one device six times
slower than the rest) and writes every span it published (--spans-file). The aggregator pushes
every second to the Prometheus, which also scrapes the same aggregator (protobuf, native
histograms): remote-written series carry the aggregator label, scraped ones job and instance,
so one Prometheus holds both paths apart. Per stage, the fleet p99 from
histogram_quantile(0.99, sum by (stage) (edgemon_stage_latency_nanoseconds)) over the pushed
series must lie in the bucket, at the agent's scale 6, of the exact p99 of every span, and
equal the scrape path's answer; counts and sums are exact; counters and gauges arrive with the
values /metrics shows; /metrics (text, and protobuf as Prometheus scrapes it) shows the
endpoint's health: requests and histograms sent, nothing dropped, no failure.

Two aggregators in one MQTT share group split the data messages by message, not by device, so
both hold a partial histogram of the same device. Each labels what it pushes
aggregator=<its label> (default: its client id, which no two members of a group share), so the
two partial series stay apart in Prometheus and sum by (stage) adds them: the fleet answer is
the one a single aggregator gives, and is checked against the exact p99 the same way.

A receiver that never answers holds back no ingest: the queue bound drops and counts.

--check refuses the new keys' bad values with FILE:LINE messages and never prints a secret.

These fail if the push is not wired (nothing in Prometheus), if the native conversion or the
families differ from the scrape (counts, quantiles), if the label were missing (the two
aggregators' series of a device would collide: Prometheus keeps one of them per timestamp and
the fleet count falls short), and if the health families were not written."""

import os
import re
import stat
import subprocess
from collections import defaultdict

import pytest

from conftest import AGGREGATOR, Aggregator, Broker, Prometheus, free_port, stopping, wait_for
from test_aggregator_native import (NATIVE, SLOW, STAGES, assert_in_bucket, counts,
                                    exact_quantile, run_sim, value)

SIM = os.environ.get("EM_SIM")
HEALTH = "edgemon_aggregator_remote_write_"


def rw_config(path, prom_port, label=None, interval="1s"):
    text = f"[remote_write]\ninterval = {interval}\n"
    if label:
        text += f"aggregator = {label}\n"
    text += f"[remote_write.prom]\nurl = http://127.0.0.1:{prom_port}/api/v1/write\n"
    path.write_text(text)
    return path


def stage_values(spans, stage):
    return [v for (_, s), vals in spans.items() if s == stage for v in vals]


def pushed_everything(prom, spans, sel):
    """Whether Prometheus's latest pushed histograms hold every span, per stage."""
    for stage in STAGES:
        got = prom.query(f'histogram_count(sum by (stage) ({NATIVE}{{stage="{stage}",{sel}}}))')
        if not got or float(got[0]["value"][1]) != len(stage_values(spans, stage)):
            return False
    return True


def metrics_text(agg):
    status, body = agg.get("/metrics")
    assert status == 200
    return body


def health(text, family, endpoint):
    m = re.search(rf'^{HEALTH}{family}\{{endpoint="{re.escape(endpoint)}"\}} (\S+)$', text,
                  re.M)
    assert m, f"{HEALTH}{family} for {endpoint} missing from /metrics"
    return float(m.group(1))


def start_prom(tmp, targets, name="prometheus"):
    prom = Prometheus(tmp, targets, name=name,
                      extra_args=["--web.enable-remote-write-receiver",
                                  "--enable-feature=native-histograms"]).start()
    wait_for(lambda: prom.api("/api/v1/status/buildinfo"), 30, "prometheus to answer")
    return prom


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """(aggregator, prometheus, spans, url): one aggregator pushing every second to a
    Prometheus that also scrapes it, after a finished simulator run."""
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    tmp = tmp_path_factory.mktemp("rw-one")
    with stopping() as started:
        broker = Broker(tmp, free_port()).start()
        started.append(broker)
        agg_port = free_port()
        prom = start_prom(tmp, [f"127.0.0.1:{agg_port}"])
        started.append(prom)
        url = f"http://127.0.0.1:{prom.port}/api/v1/write"
        cfg = rw_config(tmp / "agg.ini", prom.port, label="edge-1")
        agg = Aggregator(tmp, broker.port, extra_args=["--config", str(cfg)])
        agg.args[agg.args.index("127.0.0.1:0")] = f"127.0.0.1:{agg_port}"
        agg.start()
        started.append(agg)
        spans = run_sim(tmp, broker)
        wait_for(lambda: counts(agg) == {k: len(v) for k, v in spans.items()}, 60,
                 "every published span in the aggregator")
        wait_for(lambda: pushed_everything(prom, spans, 'aggregator="edge-1"'), 60,
                 "a push holding every span in Prometheus")
        wait_for(lambda: pushed_everything(prom, spans, 'job="edgemon"'), 60,
                 "a scrape holding every span in Prometheus")
        yield agg, prom, spans, url
        prom.stop()
        assert agg.stop() == 0, agg.log_text()[-3000:]


def test_pushed_fleet_p99_is_the_exact_p99_and_the_scrape_answer(one):
    agg, prom, spans, _ = one
    slow = f"sim-{SLOW[0]:04d}"
    for stage in STAGES:
        values = stage_values(spans, stage)
        pushed = f'{NATIVE}{{stage="{stage}",aggregator="edge-1"}}'
        scraped = f'{NATIVE}{{stage="{stage}",job="edgemon"}}'
        assert value(prom.query(f"histogram_count(sum by (stage) ({pushed}))")) == len(values)
        assert value(prom.query(f"histogram_sum(sum by (stage) ({pushed}))")) == sum(values)
        exact = exact_quantile(values, 0.99)
        fast = [v for (d, s), vals in spans.items() if s == stage and d != slow for v in vals]
        assert exact > 2 * exact_quantile(fast, 0.99), stage
        got = value(prom.query(f"histogram_quantile(0.99, sum by (stage) ({pushed}))"))
        assert_in_bucket(got, exact, f"pushed fleet p99 of {stage}")
        by_scrape = value(prom.query(f"histogram_quantile(0.99, sum by (stage) ({scraped}))"))
        assert got == by_scrape, stage
    # Per series too: one pushed histogram per device and stage, each with its spans.
    for (device, stage), values in spans.items():
        sel = f'{NATIVE}{{device="{device}",stage="{stage}",aggregator="edge-1"}}'
        assert value(prom.query(f"histogram_count({sel})")) == len(values)


def test_pushed_counters_and_gauges_are_the_ones_metrics_shows(one):
    agg, prom, spans, _ = one
    names = ("edgemon_device_data_messages_total", "edgemon_device_online",
             "edgemon_device_last_seen_seconds", "edgemon_aggregator_devices",
             "edgemon_aggregator_ingested_total")

    def differences():
        """Families whose pushed samples differ from /metrics now (a status message arriving
        after the last push moves both; the next push, a second later, catches up)."""
        text = metrics_text(agg)
        wrong = []
        for name in names:
            want = {}
            for line in text.splitlines():
                m = re.match(rf'^{name}(?:\{{device="([^"]*)"\}})? (\S+)$', line)
                if m:
                    want[m.group(1)] = float(m.group(2))
            got = {r["metric"].get("device"): float(r["value"][1])
                   for r in prom.query(f'{name}{{aggregator="edge-1"}}') or []}
            if not want or got != want:
                wrong.append((name, want, got))
        return wrong

    wait_for(lambda: not differences(), 20, "the pushed counters and gauges to match /metrics")
    # Classic buckets are for text scrapers only: none pushed.
    assert prom.query('edgemon_stage_latency_seconds_count{aggregator="edge-1"}') is None
    assert prom.query('{aggregator="edge-1",job!=""}') is None


def test_metrics_show_the_endpoint_health(one):
    agg, prom, spans, url = one
    text = metrics_text(agg)
    assert health(text, "sent_requests_total", url) > 0
    assert health(text, "sent_histograms_total", url) >= len(spans)
    assert health(text, "sent_samples_total", url) > 0
    assert health(text, "dropped_requests_total", url) == 0
    assert health(text, "dropped_histograms_total", url) == 0
    assert health(text, "queue_capacity_requests", url) == 64
    assert health(text, "last_success_time_seconds", url) > 1.6e9
    for kind in ("network", "5xx", "429", "4xx"):
        assert re.search(rf'^{HEALTH}failures_total\{{endpoint="{re.escape(url)}",'
                         rf'kind="{kind}"\}} 0$', text, re.M), kind
    # The protobuf exposition carries them too (Prometheus scrapes it in protobuf).
    got = prom.query(f'{HEALTH}sent_requests_total{{job="edgemon",endpoint="{url}"}}')
    assert got and float(got[0]["value"][1]) > 0


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """(aggregators, prometheus, spans): two aggregators in one share group, each pushing to
    the same Prometheus with the aggregator label left to its default (the client id)."""
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    tmp = tmp_path_factory.mktemp("rw-group")
    with stopping() as started:
        broker = Broker(tmp, free_port()).start()
        started.append(broker)
        prom = start_prom(tmp, [])
        started.append(prom)
        cfg = rw_config(tmp / "agg.ini", prom.port)
        aggs = []
        for name in ("agg-a", "agg-b"):
            agg = Aggregator(tmp, broker.port, name=name,
                             extra_args=["--config", str(cfg), "--share-group", "fleet"]).start()
            started.append(agg)
            aggs.append(agg)
        # Three devices: the broker hands the group's messages out in turn, and the devices
        # publish in turn, so with an even count each device could land whole on one member.
        spans = run_sim(tmp, broker, devices=3, slow=(3, SLOW[1]))

        def both_hold_everything():
            total = defaultdict(int)
            for agg in aggs:
                for k, n in counts(agg).items():
                    total[k] += n
            return dict(total) == {k: len(v) for k, v in spans.items()}

        wait_for(both_hold_everything, 60, "every published span in one of the aggregators")
        wait_for(lambda: pushed_everything(prom, spans, 'aggregator!=""'), 60,
                 "pushes holding every span in Prometheus")
        yield aggs, prom, spans
        prom.stop()
        for agg in aggs:
            assert agg.stop() == 0, agg.log_text()[-3000:]


def test_share_group_pushes_add_up_to_the_fleet_answer(group):
    aggs, prom, spans = group
    held = [counts(agg) for agg in aggs]
    # Split by message: both aggregators hold part of one device's histogram.
    assert any(held[0].get(k, 0) > 0 and held[1].get(k, 0) > 0 for k in spans), held
    labels = {r["metric"]["aggregator"] for r in prom.query(f"count by (aggregator) ({NATIVE})")}
    assert len(labels) == 2 and all(lbl.startswith("edgemon-aggregator-") for lbl in labels)
    for stage in STAGES:
        values = stage_values(spans, stage)
        sel = f'{NATIVE}{{stage="{stage}"}}'
        assert value(prom.query(f"histogram_count(sum by (stage) ({sel}))")) == len(values)
        got = value(prom.query(f"histogram_quantile(0.99, sum by (stage) ({sel}))"))
        assert_in_bucket(got, exact_quantile(values, 0.99), f"share group fleet p99 of {stage}")
    for (device, stage), values in spans.items():
        sel = f'{NATIVE}{{device="{device}",stage="{stage}"}}'
        assert value(prom.query(f"histogram_count(sum ({sel}))")) == len(values)


def check(tmp_path, text, *files):
    """(exit code, stderr + stdout) of edgemon-aggregator --check on a config of `text`."""
    assert AGGREGATOR, "EM_AGGREGATOR must name the edgemon-aggregator binary"
    cfg = tmp_path / "agg.ini"
    cfg.write_text(text)
    out = subprocess.run([AGGREGATOR, "--config", str(cfg), "--db", str(tmp_path / "x.db"),
                          "--check"], capture_output=True, timeout=30)
    return out.returncode, out.stderr.decode() + out.stdout.decode()


def secret(path, text, mode=0o600):
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_check_accepts_remote_write_and_says_where(tmp_path):
    pw = secret(tmp_path / "pw", "s3cret-pw\n")
    token = secret(tmp_path / "token", "t0ken-value\n")
    rc, out = check(tmp_path,
                    "[aggregator]\nbatch_ms = 100\n[remote_write]\ninterval = 30s\n"
                    "aggregator = edge-7\n[remote_write.a]\nurl = http://127.0.0.1:9/api/v1/write\n"
                    f"username = u\npassword_file = {pw}\ntimeout = 2s\nqueue_requests = 8\n"
                    "[remote_write.b]\nurl = https://127.0.0.1:9/push\ninsecure = true\n"
                    f"bearer_token_file = {token}\n")
    assert rc == 0, out
    assert ("remote write every 30000 ms to 2 endpoint(s) as aggregator=\"edge-7\": "
            "http://127.0.0.1:9/api/v1/write https://127.0.0.1:9/push") in out
    assert "s3cret" not in out and "t0ken" not in out


@pytest.mark.parametrize("text, message", [
    ("[remote_write]\ninterval = 0s\n[remote_write.a]\nurl = http://h/w\n",
     "agg.ini:2: [remote_write] interval '0s' wants a duration from 1s to 1h"),
    ("[remote_write]\ninterval = 15s\n",
     "agg.ini:1: [remote_write] has no endpoint"),
    ("[remote_write]\nbackoff_min = 2s\nbackoff_max = 1s\n[remote_write.a]\nurl = http://h/w\n",
     "agg.ini:1: [remote_write] backoff_max is below backoff_min"),
    ("[remote_write]\nbatch_series = 0\n[remote_write.a]\nurl = http://h/w\n",
     "agg.ini:2: [remote_write] batch_series '0' wants 1 to 100000"),
    ("[remote_write]\naggregator = a b\n[remote_write.a]\nurl = http://h/w\n",
     "agg.ini:2: [remote_write] aggregator 'a b' wants 1 to 63 characters"),
    ("\n[remote_write.a]\ntimeout = 5s\n",
     "agg.ini:2: [remote_write.a] url is required"),
    ("[remote_write.a]\nurl = ftp://h/w\n",
     "agg.ini:1: [remote_write.a] url 'ftp://h/w' wants http://HOST[:PORT]/PATH"),
    ("[remote_write.a]\nurl = http://u:pw@h/w\n",
     "agg.ini:1: [remote_write.a] url 'http://u:pw@h/w' holds user:password@"),
    ("[remote_write.a]\nurl = http://h/w\ntiemout = 5s\n",
     "agg.ini:3: [remote_write.a] tiemout '5s' is not a key of [remote_write.a]; "
     "did you mean 'timeout'?"),
    ("[remote_write.a]\nurl = http://h/w\ntimeout = 1ms\n",
     "agg.ini:3: [remote_write.a] timeout '1ms' wants a duration from 100ms to 10m"),
    ("[remote_write.a]\nurl = http://h/w\nqueue_requests = 5000\n",
     "agg.ini:3: [remote_write.a] queue_requests '5000' wants 1 to 4096"),
    ("[remote_write.a]\nurl = http://h/w\nusername = u\n",
     "agg.ini:1: [remote_write.a] username and password_file go together"),
    ("[remote_write.a]\nurl = http://h/w\nca_file = ca.crt\n",
     "agg.ini:1: [remote_write.a] ca_file and insecure want an https:// url"),
    ("[remote_write.a/b]\nurl = http://h/w\n",
     "agg.ini:1: section [remote_write.a/b]: NAME of [remote_write.NAME] wants"),
    ("".join(f"[remote_write.e{i}]\nurl = http://h/w\n" for i in range(17)),
     "agg.ini:33: section [remote_write.e16]: at most 16 remote write endpoints"),
    ("[remote]\nurl = http://h/w\n",
     "agg.ini:2: section [remote] is unknown"),
])
def test_check_refuses_bad_remote_write_keys_with_their_line(tmp_path, text, message):
    rc, out = check(tmp_path, text)
    assert rc == 2, out
    assert message in out, out


def test_check_refuses_secret_files_others_can_read_and_never_shows_them(tmp_path):
    pw = secret(tmp_path / "pw", "s3cret-pw\n", 0o644)
    rc, out = check(tmp_path, f"[remote_write.a]\nurl = http://h/w\nusername = u\n"
                    f"password_file = {pw}\n")
    assert rc == 2 and f"agg.ini:1: [remote_write.a] password_file '{pw}'" in out, out
    assert "s3cret" not in out
    token = secret(tmp_path / "token", "t0ken\nmore\n")
    rc, out = check(tmp_path, f"[remote_write.a]\nurl = http://h/w\n"
                    f"bearer_token_file = {token}\n")
    assert rc == 2 and "wants the secret alone on its first line" in out, out
    assert "t0ken" not in out
    rc, out = check(tmp_path, f"[remote_write.a]\nurl = http://h/w\n"
                    f"bearer_token_file = {tmp_path / 'none'}\n")
    assert rc == 2 and "cannot be read" in out, out
    assert stat.S_IMODE(os.stat(pw).st_mode) == 0o644


def test_a_receiver_that_never_answers_holds_back_no_ingest(tmp_path):
    """An endpoint that accepts connections and never answers: the pushes queue, the queue's
    bound drops and counts the rest, every span is still ingested, and the aggregator stops
    within its drain."""
    import socket
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    with stopping() as started, socket.socket() as stuck:
        stuck.bind(("127.0.0.1", 0))
        stuck.listen(64)  # Connections complete in the backlog; nothing is ever read.
        url = f"http://127.0.0.1:{stuck.getsockname()[1]}/api/v1/write"
        cfg = tmp_path / "agg.ini"
        cfg.write_text("[remote_write]\ninterval = 1s\nbatch_series = 20\ndrain = 1s\n"
                       f"[remote_write.stuck]\nurl = {url}\ntimeout = 10m\nqueue_requests = 2\n")
        broker = Broker(tmp_path, free_port()).start()
        started.append(broker)
        agg = Aggregator(tmp_path, broker.port, extra_args=["--config", str(cfg)]).start()
        started.append(agg)
        spans = run_sim(tmp_path, broker)
        wait_for(lambda: counts(agg) == {k: len(v) for k, v in spans.items()}, 60,
                 "every published span in the aggregator")
        wait_for(lambda: health(metrics_text(agg), "dropped_requests_total", url) > 0, 30,
                 "a full queue to drop and count a request")
        text = metrics_text(agg)
        assert health(text, "sent_requests_total", url) == 0
        assert health(text, "queue_requests", url) == 2
        assert health(text, "dropped_histograms_total", url) > 0
        assert agg.stop() == 0, agg.log_text()[-3000:]
