"""Several streams in one writer application (``laketide.ingest.group``), with the real writer process and a real
catalog; the tests of this module share one lake and run in order:

* a stream added to a running group's configuration starts from nothing at the application's next start, the
  others resume from their checkpoints exactly once;
* SIGKILL at each commit point, each time in another stream's batch, then a restart: 0 lost, 0 duplicated per
  stream;
* the application frozen (SIGSTOP) in a batch and overtaken by a second one, then resumed: fenced, each stream
  exactly once;
* one stream's input broken (a landed file deleted before its batch reads it) and another's checkpoint lost: each
  stops alone with a clear message (log, writer status, alert), the healthy stream goes on ingesting exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laketide.ingest.landing import data_dir
from laketide.lake import writer_status
from laketide.lake.commits import read_checkpoint
from laketide.lake.lease import engine_for
from tests.helpers import (
    freeze,
    ingest,
    kill_group,
    load,
    start_writer,
    unique_catalog,
    wait_for,
    wait_lease_silent,
    write_group_config,
    writer_log,
)
from tests.test_writer import assert_exactly_once, produce

pytestmark = pytest.mark.slow

GROUP = "g"
#: the module lake's catalog: its applications run in writer processes and on this process's Spark session
CATALOG = unique_catalog("group")
START = "2026-11-21T20:00:00+00:00"


def land(config_path: Path, name: str, hour: str, seed: int, events: int = 120) -> None:
    """Events of one hour into stream ``name``'s landing zone (the streams share their fields; a stream not in the
    configuration yet is reached by its landing path)."""
    produce(config_path, "--stream", "a", "--landing-path", str(config_path.parent / "landing" / name),
            "--producer-id", f"p-{name}", "--start", hour, "--hours", "1", "--events-per-hour", str(events),
            "--events-per-file", "40", "--malformed-ratio", "0.03", "--seed", str(seed))


def committed(config_path: Path, name: str) -> int:
    return read_checkpoint(load(config_path).stream(name).checkpoint_path).last_commit or -1


@pytest.fixture(scope="module")
def lake(jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("group")
    # a short lease: a frozen application is overtaken within seconds; a 1 s trigger: batches follow each other
    path = write_group_config(home, ["a", "b"], GROUP, catalog_name=CATALOG, writer_lease="5s", trigger_interval="1s",
                              max_files_per_trigger=2)
    for i, name in enumerate(("a", "b", "c")):
        land(path, name, START, seed=10 + i)
    yield path


def test_a_stream_added_to_the_group_starts_from_nothing(spark: Any, lake: Path) -> None:
    """The application runs on this process's Spark session (``tests.helpers.ingest``): the same group code as a
    writer process."""
    ingest(spark, lake, group=GROUP)
    before = {n: assert_exactly_once(lake, n) for n in ("a", "b")}
    batches = {n: committed(lake, n) for n in ("a", "b")}
    # the configuration gains stream c (landed already); a gets more files
    write_group_config(lake.parent, ["a", "b", "c"], GROUP, catalog_name=CATALOG, writer_lease="5s",
                       trigger_interval="1s", max_files_per_trigger=2)
    land(lake, "a", "2026-11-21T21:00:00+00:00", seed=20)
    ingest(spark, lake, group=GROUP)
    assert committed(lake, "b") == batches["b"]  # nothing new for b: its checkpoint untouched
    assert committed(lake, "a") > batches["a"]
    assert assert_exactly_once(lake, "b") == before["b"]
    assert_exactly_once(lake, "a")
    assert_exactly_once(lake, "c")  # from nothing, everything that had landed
    assert "writer c-writer started" in writer_log(lake)
    assert "[c] batch 0 committed" in writer_log(lake)  # the streams' lines interleave: each names its stream


def test_killed_with_one_streams_batch_half_committed(spark: Any, lake: Path) -> None:
    """The writer application's process is SIGKILLed with stream c's batch half in Iceberg (its rejects committed,
    its events not) and the other streams anywhere in theirs; the application that restarts from what it left runs
    on this process's Spark session: every stream exactly once. Every commit point of a writer (a group of one) on
    both commit paths: tests/test_faults.py."""
    point, stream = "between_tables", "c"
    faults = lake.parent / "faults" / f"{point}-{stream}"
    for i, name in enumerate(("a", "b", "c")):  # an hour of new files for every stream
        land(lake, name, "2026-11-22T00:00:00+00:00", seed=130 + i)  # seeds make event ids: never reuse one
    batch = committed(lake, stream) + 1
    proc = start_writer(lake, group=GROUP, LAKETIDE_FAULT=f"{point}:{batch}:{stream}", LAKETIDE_FAULT_DIR=str(faults))
    wait_for(faults / f"{point}-{batch}.reached", proc)
    kill_group(proc)  # SIGKILL: every stream of the application dies at once, mid-batch for one of them
    ingest(spark, lake, group=GROUP)
    for name in ("a", "b", "c"):
        assert_exactly_once(lake, name)


def test_a_frozen_application_overtaken_then_resumed_commits_nothing(lake: Path) -> None:
    faults = lake.parent / "faults" / "frozen"
    for i, name in enumerate(("a", "b", "c")):
        land(lake, name, "2026-11-22T02:00:00+00:00", seed=50 + i)
    batch = committed(lake, "b") + 1
    log_a, log_b = lake.parent / "frozen-a.log", lake.parent / "frozen-b.log"
    first = start_writer(lake, mode="continuous", log=log_a, group=GROUP, LAKETIDE_FAULT=f"before_commit:{batch}:b",
                         LAKETIDE_FAULT_MODE="hold", LAKETIDE_FAULT_DIR=str(faults))
    second = None
    try:
        wait_for(faults / f"before_commit-{batch}.reached", first)  # b's batch written, not committed
        freeze(first, lake)  # outside a SQLite write transaction: a frozen lock holder blocks every process
        wait_lease_silent(lake)  # past the 5 s lease: the second application takes every stream over
        second = start_writer(lake, mode="continuous", log=log_b, group=GROUP)
        deadline = time.monotonic() + 240
        while committed(lake, "b") < batch and time.monotonic() < deadline:
            time.sleep(0.5)
        assert committed(lake, "b") >= batch, log_b.read_text(errors="replace")[-4000:]
        (faults / f"before_commit-{batch}.release").touch()
        os.killpg(first.pid, signal.SIGCONT)  # the first wakes up holding b's written batch
        assert first.wait(timeout=180) == 5, log_a.read_text(errors="replace")[-5000:]
        text = log_a.read_text(errors="replace")
        assert "moved on under this writer" in text or "lost its lease" in text, text[-5000:]
        assert second.poll() is None
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=120) == 0, log_b.read_text(errors="replace")[-4000:]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
                kill_group(proc)
    for name in ("a", "b", "c"):
        assert_exactly_once(lake, name)


def test_a_broken_stream_and_a_lost_checkpoint_stop_alone(lake: Path, tmp_path: Path) -> None:
    import shutil

    config = load(lake)
    shutil.rmtree(config.stream("c").checkpoint_path)  # c: its checkpoint is lost, its table holds batches
    land(lake, "b", "2026-11-22T03:00:00+00:00", seed=70, events=40)  # b: one new file, deleted before it is read
    victim = max(data_dir(config.stream("b").landing_path).glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    faults = lake.parent / "faults" / "broken"
    batch = committed(lake, "b") + 1
    log = lake.parent / "broken.log"
    alerts = tmp_path / "alerts.jsonl"
    proc = start_writer(lake, mode="continuous", log=log, group=GROUP, LAKETIDE_FAULT=f"batch_start:{batch}:b",
                        LAKETIDE_FAULT_MODE="hold", LAKETIDE_FAULT_DIR=str(faults),
                        LAKETIDE__CLOSE__ALERT_CALLBACK="laketide.dev.alerts:record", LAKETIDE_ALERT_LOG=str(alerts))
    try:
        wait_for(faults / f"batch_start-{batch}.reached", proc)
        victim.unlink()  # the producer broke the contract: the batch's file is gone before it is read
        (faults / f"batch_start-{batch}.release").touch()
        wait_text(log, "stream b stopped", proc)
        # a, healthy, goes on: new files are ingested while b and c are stopped
        before = committed(lake, "a")
        land(lake, "a", "2026-11-22T04:00:00+00:00", seed=71)
        deadline = time.monotonic() + 180
        while committed(lake, "a") <= before and time.monotonic() < deadline:
            time.sleep(0.5)
        assert committed(lake, "a") > before, log.read_text(errors="replace")[-4000:]
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    text = log.read_text(errors="replace")
    assert code != 0, text[-4000:]  # when it ends, the application says that streams did not ingest
    assert "stream c stopped: CheckpointMismatchError: refusing to start writer 'c-writer'" in text, text[-6000:]
    assert "stream b stopped" in text and victim.name in text, text[-6000:]
    assert_exactly_once(lake, "a")
    states = writer_status.read(engine_for(config.catalog))
    assert states["a"].state == "stopped" and states["b"].state == "failed" and states["c"].state == "failed"
    assert "checkpoint" in states["c"].reason and victim.name in states["b"].reason
    sent = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert {a["laketide_alert"]["stream"] for a in sent} == {"b", "c"}


def wait_text(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the writer ended ({proc.returncode}) before logging {text!r}")
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {text!r} in {log}: {log.read_text(errors='replace')[-4000:]}")
