"""A stream whose batch kills the writer application (its JVM) is named and held out, the other streams of its
group go on (``laketide.ingest.failures``, ``laketide.ingest.group``): a real two-stream group in real writer
processes; stream b's batch "kills the JVM" (the process group is SIGKILLed while that batch is in flight, at its
``batch_start`` fault point) twice in a row; the third start holds b out (writer status, Prometheus metrics, the
failed-batch record: its files and what to do) and stream a keeps committing new files; once the named files are
moved out of b's ``data/`` folder, as the status says, b's next start replays its batch without them."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from laketide.ingest import failures
from laketide.ingest.landing import data_dir
from laketide.lake import writer_status
from laketide.lake.commits import read_checkpoint
from laketide.lake.lease import engine_for
from tests.helpers import ingest, kill_group, load, start_writer, unique_catalog, wait_for, write_group_config
from tests.test_group import committed, land, wait_text
from tests.test_writer import assert_exactly_once

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stream_whose_batch_kills_the_application_is_held_out(spark: Any, tmp_path: Path) -> None:
    path = write_group_config(tmp_path, ["a", "b"], "g", catalog_name=unique_catalog("held"), trigger_interval="1s",
                              max_files_per_trigger=2, writer_lease="5s")
    port = free_port()
    raw = yaml.safe_load(path.read_text())
    raw["writer_groups"] = {"g": {"metrics_port": port}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    land(path, "a", "2026-11-22T01:00:00+00:00", seed=1, events=80)
    land(path, "b", "2026-11-22T01:00:00+00:00", seed=2, events=80)
    config = load(path)
    b = config.stream("b")
    faults = tmp_path / "faults"
    for death in (1, 2):  # b's batch 0 is in flight each time the application dies
        log = tmp_path / f"death-{death}.log"
        proc = start_writer(path, group="g", log=log, LAKETIDE_FAULT="batch_start:0:b",
                            LAKETIDE_FAULT_DIR=str(faults / str(death)))
        wait_for(faults / str(death) / "batch_start-0.reached", proc)
        kill_group(proc)
    text = log.read_text(errors="replace")
    assert "stream b replays batch 0 alone first" in text, text[-4000:]  # after the first death: b's turn, alone
    assert "writer a-writer started" not in text.split("stream b replays batch 0 alone first")[1], text[-4000:]
    named = failures.read(b)
    assert named is not None and named["deaths"] == 1 and named["batch_id"] == 0  # the second death: at the next start
    in_flight = json.loads(failures.in_flight_path(b).read_text())
    assert in_flight["batch_id"] == 0 and in_flight["files"], in_flight  # named before the batch's work

    log = tmp_path / "held-out.log"
    proc = start_writer(path, mode="continuous", group="g", log=log)
    try:
        wait_text(log, "stream b held out", proc)
        record = failures.read(b)
        assert record is not None and record["deaths"] == 2 and record["batch_id"] == 0
        files = record["files"]
        assert files and all((data_dir(b.landing_path) / f).exists() for f in files)
        deadline = time.monotonic() + 60  # the status as the application reported it, however slow the machine
        while (status := writer_status.read(engine_for(config.catalog))["b"]).state != "held out":
            assert time.monotonic() < deadline and proc.poll() is None, status
            time.sleep(0.5)
        assert all(f in status.reason for f in files) and "Move them out of" in status.reason, status.reason
        assert str(failures.record_path(b)) in status.reason
        before = committed(path, "a")
        land(path, "a", "2026-11-22T02:00:00+00:00", seed=3, events=40)  # a goes on while b is held out
        deadline = time.monotonic() + 120
        while committed(path, "a") <= before and time.monotonic() < deadline:
            time.sleep(0.5)
        assert committed(path, "a") > before, log.read_text(errors="replace")[-4000:]
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'laketide_writer_state{stream="b",group="g",state="held out"} 1' in page, page
        assert 'laketide_writer_held_out{stream="b",group="g",batch="0"} 1' in page, page
        assert 'laketide_writer_up{stream="a",group="g"} 1' in page, page
        # the real writer's commits of a, counted at the scrape; none of b's batch, which never committed
        counted = {line.split("{")[0]: float(line.split()[-1]) for line in page.splitlines()
                   if 'stream="a"' in line and not line.startswith("#")}
        assert counted["laketide_batches_committed_total"] >= 1, page
        assert counted["laketide_rows_committed_total"] + counted["laketide_rejects_committed_total"] >= 40, page
        assert abs(counted["laketide_last_commit_timestamp_seconds"] - time.time()) < 300, page
        assert 'laketide_batches_committed_total{stream="b",group="g"} 0' in page, page
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    text = log.read_text(errors="replace")
    assert code == 1, text[-4000:]  # the application ends saying that a stream did not ingest
    assert_exactly_once(path, "a")
    assert read_checkpoint(b.checkpoint_path).last_commit is None  # nothing of b's batch: it waits for the operator
    writer = _panel(config)
    assert writer.reported is not None and writer.reported.state == "held out"
    # what the operator is told to do: move the named files out of data/; the next start replays the batch
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in files:
        (data_dir(b.landing_path) / name).rename(aside / name)
    ingest(spark, path, group="g")
    assert read_checkpoint(b.checkpoint_path).last_commit == 0 and failures.read(b) is None  # the batch, without them
    assert writer_status.read(engine_for(config.catalog))["b"].state == "done"


def _panel(config: Any) -> Any:
    """The lakehouse view's writer panel of stream b (what the UI shows)."""
    from laketide.airflow.ui.writer import writer

    return writer(config, config.stream("b"))
