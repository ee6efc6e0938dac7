"""A writer application's figures without Spark: the Prometheus page served over real HTTP, the freshness
thresholds that alert once per crossing, the writer status record in a real catalog database, and the groups of
the configuration."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from laketide.config import load_config
from laketide.errors import ConfigError
from laketide.ingest import batch_figures
from laketide.ingest.backlog import Freshness
from laketide.ingest.group import Application, Writer
from laketide.ingest.late_files import LateFiles
from laketide.ingest.metrics import MetricsServer
from laketide.lake import writer_status
from laketide.lake.lease import engine_for
from tests.helpers import load, write_config, write_group_config


def writers(config_path: Path) -> list[Writer]:
    config = load(config_path)
    return [Writer(s, None, LateFiles(s)) for s in config.streams]  # type: ignore[arg-type]


def test_the_metrics_page_over_http(tmp_path: Path) -> None:
    # stream names of this test alone: the commit counters are the process's, and other tests' writers ran in it
    ws = writers(write_group_config(tmp_path, ["pa", "pb"], "g"))
    ws[0].state, ws[0].query = "running", object()  # type: ignore[assignment]
    ws[0].figures = Freshness(datetime.now(UTC), 4.0, 11.5, 20.0, 30, 12.25, 3, datetime.now(UTC))
    ws[1].state = "failed"
    server = MetricsServer(0, "g", host="127.0.0.1")
    try:
        server.update(ws)
        before = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10).read().decode()
        # a commit after the last status round is on the next scrape: the page is rendered when scraped
        batch_figures.record("pa", 480, 20, 2.5, "2026-11-22T03:59:59+00:00")
        batch_figures.record("pa", 500, 0, 1.5, None)
        page = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10).read().decode()
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=10)
    finally:
        server.close()
    lines = set(page.splitlines())
    assert 'laketide_writer_up{stream="pa",group="g"} 1' in lines
    assert 'laketide_writer_up{stream="pb",group="g"} 0' in lines
    assert 'laketide_writer_state{stream="pb",group="g",state="failed"} 1' in lines
    assert 'laketide_landed_to_committed_seconds{stream="pa",group="g",quantile="0.95"} 11.500' in lines
    assert 'laketide_writer_lag_seconds{stream="pa",group="g"} 12.250' in lines
    assert 'laketide_backlog_files{stream="pa",group="g"} 3' in lines
    assert "# TYPE laketide_backlog_files gauge" in lines
    assert 'laketide_batches_committed_total{stream="pa",group="g"} 0' in before.splitlines()
    assert 'laketide_batches_committed_total{stream="pa",group="g"} 2' in lines
    assert 'laketide_rows_committed_total{stream="pa",group="g"} 980' in lines
    assert 'laketide_rejects_committed_total{stream="pa",group="g"} 20' in lines
    assert 'laketide_batch_seconds_total{stream="pa",group="g"} 4.000' in lines
    assert 'laketide_last_batch_seconds{stream="pa",group="g"} 1.500' in lines
    # the duration histogram: 1.5 s and 2.5 s, in the buckets up to 2 s and up to 5 s
    assert "# TYPE laketide_batch_duration_seconds histogram" in lines
    histogram = {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in lines
                 if line.startswith("laketide_batch_duration_seconds") and 'stream="pa"' in line}
    assert [histogram[f'laketide_batch_duration_seconds_bucket{{stream="pa",group="g",le="{le}"}}']
            for le in ("1", "2", "5", "300", "+Inf")] == ["0", "1", "2", "2", "2"]
    assert histogram['laketide_batch_duration_seconds_sum{stream="pa",group="g"}'] == "4.000"
    assert histogram['laketide_batch_duration_seconds_count{stream="pa",group="g"}'] == "2"
    # a batch that moved no watermark keeps the last one
    assert 'laketide_watermark_timestamp_seconds{stream="pa",group="g"} 1795319999.000' in lines
    (last,) = [line for line in lines if line.startswith('laketide_last_commit_timestamp_seconds{stream="pa"')]
    assert abs(float(last.split()[-1]) - time.time()) < 60
    assert "# TYPE laketide_rows_committed_total counter" in lines
    assert 'laketide_batches_committed_total{stream="pb",group="g"} 0' in lines  # counters start at 0
    assert not any(line.startswith('laketide_last_commit_timestamp_seconds{stream="pb"') for line in lines)  # none yet


def test_thresholds_alert_once_per_crossing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_group_config(tmp_path, ["a"], "g", alert_latency="30s", alert_backlog_files=10)
    raw = yaml.safe_load(path.read_text())
    raw["close"] = {"alert_callback": "laketide.dev.alerts:record"}
    path.write_text(yaml.safe_dump(raw))
    log = tmp_path / "alerts.jsonl"
    monkeypatch.setenv("LAKETIDE_ALERT_LOG", str(log))
    config = load(path)
    app = Application(config, config.streams, "continuous")
    (w,) = app.writers

    def figures(p95: float, backlog: int) -> Freshness:
        return Freshness(datetime.now(UTC), 1.0, p95, p95, 10, 1.0, backlog, datetime.now(UTC))

    for p95, backlog in ((5.0, 2), (45.0, 2), (50.0, 12), (50.0, 12), (5.0, 2), (40.0, 2)):
        w.figures = figures(p95, backlog)
        app._check_thresholds(w)
    sent = [json.loads(line)["laketide_alert"] for line in log.read_text().splitlines()]
    assert [a["kind"] for a in sent] == ["writer latency", "writer backlog", "writer latency"]
    assert "p95 45.0s over the last hour is above alert_latency (30s)" in sent[0]["message"]
    assert sent[1]["message"].startswith("12 landed file(s) wait for the writer") and sent[0]["stream"] == "a"


def test_the_writer_status_record(tmp_path: Path) -> None:
    config = load(write_config(tmp_path))
    engine = engine_for(config.catalog)
    assert writer_status.read(engine) == {}
    writer_status.report(engine, "clicks", "web", "running", "", {"p95": 3.5})
    writer_status.report(engine, "clicks", "web", "failed", "stream 'clicks': boom")
    (status,) = writer_status.read(engine).values()
    assert (status.stream, status.group, status.state) == ("clicks", "web", "failed")
    assert status.reason == "stream 'clicks': boom"
    with pytest.raises(ValueError, match="unknown writer state"):
        writer_status.report(engine, "clicks", "web", "exploded")


def test_a_stream_finishing_its_batch_before_it_stops_is_reported(tmp_path: Path) -> None:
    """The status interval can fall while a stream asked to stop still runs its batch (a long one, after a catalog
    outage): its state is recorded as such, and the application goes on (it used to fail: "unknown writer
    state 'stopping'", found by the 30 s catalog outage test on a loaded machine)."""
    config = load(write_group_config(tmp_path, ["a"], "g"))
    app = Application(config, config.streams, "continuous")
    (w,) = app.writers
    w.state, w.reason = "stopping", "stop file /x/a.stop"
    app._report(w)
    (status,) = writer_status.read(app.engine).values()
    assert (status.stream, status.state, status.reason) == ("a", "stopping", "stop file /x/a.stop")


def test_groups_of_the_configuration(tmp_path: Path) -> None:
    path = write_group_config(tmp_path, ["a", "b", "c"], "g")
    raw = yaml.safe_load(path.read_text())
    raw["streams"][2]["group"] = None  # c: a group of its own
    raw["writer_groups"] = {"g": {"metrics_port": 9300}}
    path.write_text(yaml.safe_dump(raw))
    config = load(path)
    assert {g: [s.name for s in ss] for g, ss in config.groups().items()} == {"g": ["a", "b"], "c": ["c"]}
    assert config.group_settings("g").metrics_port == 9300 and config.group_settings("c").metrics_port == 0
    with pytest.raises(ConfigError, match="unknown writer group 'nope'"):
        config.group("nope")
    for change, message in (
        ({"writer_groups": {"x": {}}}, "writer_groups.x: no stream is in writer group 'x'"),
        ({"writer_groups": {"g": {"metrics_port": 9300}, "c": {"metrics_port": 9300}}},
         r"writer_groups\.[cg]\.metrics_port: 9300 is already the port of group '[cg]'"),
    ):
        with pytest.raises(ConfigError, match=message):
            path.write_text(yaml.safe_dump({**raw, **change}))
            load_config(path, environ={})
    raw["streams"][0]["group"], raw["streams"][2]["group"] = "c", "g"  # group 'c' while stream c runs in 'g'
    raw.pop("writer_groups")
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"streams\[a\]\.group: 'c' is the name of stream 'c'"):
        load_config(path, environ={})
