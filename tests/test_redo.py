"""Redo from a snapshot, end to end: a real lake is corrupted on purpose (wrong rows appended, rows deleted), the
real redo job returns it to the last good snapshot and re-ingests what landed since; every hour adds up again,
the resumed writer ingests new events exactly once, a redo killed with SIGKILL finishes when run again, two
redos in a row give the same table, a dry run changes nothing, and every bad param is refused first.

The tests of this module share one lake and run in order (each builds on the previous state)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laketide.close.partitions import State
from laketide.close.status import history
from laketide.config import REPO_ROOT, LaketideConfig
from laketide.errors import RequestError
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import REDO_ID, read_checkpoint, table_marker
from laketide.redo.checkpoint import backup_path
from laketide.redo.params import check_identifier, check_range, validate
from tests.helpers import (
    config_env,
    ingest,
    load,
    run_writer,
    start_writer,
    unique_catalog,
    wait_for_log,
    write_config,
    writer_log,
)
from tests.test_writer import assert_exactly_once, produce

pytestmark = pytest.mark.slow
REDO = REPO_ROOT / "spark_jobs" / "redo.py"
START = "2026-11-20T08:00:00+00:00"


@dataclass
class Lake:
    config_path: Path
    config: LaketideConfig
    good: int  # the last good snapshot of the events table

    @property
    def stream(self) -> Any:
        return self.config.stream("clicks")


def start_redo(config_path: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    out = open(config_path.parent / "redo.log", "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, str(REDO), "--stream", "clicks", *args],
                            env=config_env(config_path, **env),
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def redo(config_path: Path, *args: str, timeout: float = 400) -> int:
    proc = start_redo(config_path, *args)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def redo_here(spark: Any, config_path: Path, *args: str) -> int:
    """The redo job of ``spark_jobs/redo.py`` (its params, its exit codes, its report) run on this process's
    SparkSession instead of a process of its own, as :func:`tests.helpers.ingest` runs the writer: for the tests of
    what a redo does to the lake. What is about the job's process (a SIGKILL, a run held by a live writer, the refusals
    made before Spark starts) runs it as a process (:func:`redo`). Its output and log go to the home's ``redo.log``."""
    import contextlib

    from tests.helpers import bind_catalog, logged_to

    job = _redo_job()
    config = load(config_path)
    bind_catalog(spark, config)
    with logged_to(config_path.parent / "redo.log") as out, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(out):
        code: int = job.execute(job.parse(["--stream", "clicks", *args]), spark, config)
    return code


@functools.cache
def _redo_job() -> Any:
    """``spark_jobs/redo.py`` as a module (loaded once: it is a script, not part of a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("laketide_redo_job", REDO)
    assert spec is not None and spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


def redo_log(config_path: Path) -> str:
    path = config_path.parent / "redo.log"
    return path.read_text(errors="replace") if path.exists() else ""


def heads(lake: Lake) -> tuple[int | None, int | None]:
    catalog = load_catalog(lake.config.catalog)
    return (catalog.load_table(lake.stream.table).metadata.current_snapshot_id,
            catalog.load_table(lake.stream.rejects_table).metadata.current_snapshot_id)


def checkpoint_files(lake: Lake) -> dict[str, bytes]:
    root = lake.stream.checkpoint_path
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def table_content(lake: Lake) -> tuple[Counter[str], Counter[str]]:
    """Event ids of the events table and source files of the rejects table, with multiplicities."""
    catalog = load_catalog(lake.config.catalog)
    events = catalog.load_table(lake.stream.table).scan(selected_fields=("event_id",)).to_arrow()
    rejects = catalog.load_table(lake.stream.rejects_table).scan(selected_fields=("source_file",)).to_arrow()
    return Counter(events.column("event_id").to_pylist()), Counter(rejects.column("source_file").to_pylist())


def assert_checkpoint_matches(lake: Lake) -> None:
    marker = table_marker(load_catalog(lake.config.catalog), lake.stream.table, lake.stream.writer_id)
    state = read_checkpoint(lake.stream.checkpoint_path)
    assert marker is not None and state.last_commit == marker.batch_id == state.last_offset


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """Two hours ingested (the good snapshot), two more landed and ingested after it, then the table corrupted."""
    home = tmp_path_factory.mktemp("redo-lake")
    config_path = write_config(home, catalog_name=unique_catalog("redo"), max_files_per_trigger=3, live=False)
    produce(config_path, "--start", START, "--hours", "2", "--events-per-hour", "300", "--events-per-file", "100",
            "--malformed-ratio", "0.03", "--seed", "21")
    ingest(spark, config_path)
    config = load(config_path)
    stream = config.stream("clicks")
    good = load_catalog(config.catalog).load_table(stream.table).metadata.current_snapshot_id
    assert good is not None
    produce(config_path, "--start", "2026-11-20T10:00:00+00:00", "--hours", "2", "--events-per-hour", "300",
            "--events-per-file", "100", "--malformed-ratio", "0.03", "--late-ratio", "0.1", "--late-by", "20m",
            "--seed", "22")
    ingest(spark, config_path)
    assert_exactly_once(config_path)
    return Lake(config_path, config, good)


def corrupt(lake: Lake) -> None:
    """Wrong rows appended (copies of rows of the first hour) and rows deleted (some of the third hour)."""
    from pyiceberg.expressions import In

    table = load_catalog(lake.config.catalog).load_table(lake.stream.table)
    rows = table.scan().to_arrow()
    hour = rows.column("event_time").to_pylist()[0].replace(minute=0, second=0, microsecond=0)
    same_hour = [i for i, t in enumerate(rows.column("event_time").to_pylist())
                 if t.replace(minute=0, second=0, microsecond=0) == hour]
    table.append(rows.take(same_hour[:25]))
    later = sorted(rows.column("event_id").to_pylist())[-40:]
    load_catalog(lake.config.catalog).load_table(lake.stream.table).delete(In("event_id", later))


def test_invalid_params_fail_before_any_change(lake: Lake) -> None:
    before, ckpt = heads(lake), checkpoint_files(lake)
    config = lake.config
    cases: list[tuple[dict[str, Any], str]] = [
        ({"stream": "nope", "snapshot_id": lake.good}, r"unknown stream 'nope'; configured streams: \['clicks'\]"),
        ({"stream": "clicks'; DROP TABLE lake.clicks; --", "snapshot_id": lake.good}, "is not a stream name"),
        ({"stream": "clicks", "snapshot_id": 12345}, "12345 is not in the history of lake.clicks"),
        ({"stream": "clicks"}, "give exactly one of snapshot_id"),
        ({"stream": "clicks", "snapshot_id": lake.good, "at": "2026-11-20T09:00:00+00:00"}, "not both"),
        ({"stream": "clicks", "at": "2001-01-01T00:00:00+00:00"}, "before the first snapshot"),
        ({"stream": "clicks", "at": "yesterday"}, "not an ISO timestamp"),
        ({"stream": "clicks", "snapshot_id": lake.good, "start": "2026-11-20T11:00:00+00:00",
          "end": "2026-11-20T09:00:00+00:00"}, "must be before end"),
        ({"stream": "clicks", "snapshot_id": lake.good, "start": "2026-11-25T00:00:00+00:00"}, "outside the table"),
        ({"stream": "clicks", "snapshot_id": lake.good, "start": "2026-11-20T09:30:00+00:00"},
         "not the start of an hour"),
        ({"stream": "clicks", "snapshot_id": lake.good, "end": "2026-11-20T10:00:00"}, "no UTC offset"),
        ({"stream": "clicks", "snapshot_id": lake.good, "dry_run": "maybe"}, "dry_run: 'maybe' is not true or false"),
        ({"stream": "clicks", "snapshot_id": "1; DROP TABLE x"}, "is not a snapshot id"),
    ]
    for params, message in cases:
        with pytest.raises(RequestError, match=message):
            validate(config, **params)
    with pytest.raises(RequestError, match="is not a plain identifier"):
        check_identifier("lake.clicks; --", "table")
    assert check_range(None, None).describe() == "every hour"

    # the job refuses the same way (exit 2, no Spark started)
    assert redo(lake.config_path, "--snapshot-id", "12345", "--dry-run", "false") == 2
    assert "12345 is not in the history" in redo_log(lake.config_path)
    # a redo of the stream while another redo runs: refused, naming it
    from laketide.redo.job import lease_of

    other = lease_of(config, lake.stream)
    other.acquire()
    try:
        assert redo(lake.config_path, "--snapshot-id", str(lake.good), "--dry-run", "false") == 4
        assert "another redo of stream 'clicks' is running" in redo_log(lake.config_path)
    finally:
        other.release()
    # a range that the redo would overflow (the rollback changes the two later hours too) is refused before
    # anything changes
    assert redo(lake.config_path, "--snapshot-id", str(lake.good), "--start", "2026-11-20T08:00:00+00:00",
                "--end", "2026-11-20T10:00:00+00:00", "--dry-run", "false") == 2
    assert "changes hours outside the range" in redo_log(lake.config_path)
    assert heads(lake) == before and checkpoint_files(lake) == ckpt
    assert history(config, "clicks") == []


def test_dry_run_reports_and_changes_nothing(lake: Lake) -> None:
    corrupt(lake)
    before, ckpt, content = heads(lake), checkpoint_files(lake), table_content(lake)
    assert redo(lake.config_path, "--snapshot-id", str(lake.good)) == 0, redo_log(lake.config_path)
    out = redo_log(lake.config_path)
    assert f"back to snapshot {lake.good}" in out and "landing files to re-ingest" in out
    assert heads(lake) == before and checkpoint_files(lake) == ckpt and table_content(lake) == content
    assert history(lake.config, "clicks") == []
    assert not list(lake.stream.checkpoint_path.parent.glob("*.redo-*"))


def test_redo_restores_every_hour_and_the_writer_resumes_exactly_once(spark: Any, lake: Lake) -> None:
    with pytest.raises(AssertionError):
        assert_exactly_once(lake.config_path)  # corrupted by the previous test
    assert redo_here(spark, lake.config_path, "--snapshot-id", str(lake.good), "--dry-run", "false",
                     "--run-id", "fix-1", "--user", "alice") == 0, redo_log(lake.config_path)
    assert_exactly_once(lake.config_path)
    assert_checkpoint_matches(lake)
    assert backup_path(lake.stream.checkpoint_path, "fix-1").is_dir()
    table = load_catalog(lake.config.catalog).load_table(lake.stream.table)
    redone = [s for s in table.metadata.snapshots if (s.summary or {}).get(REDO_ID) == "fix-1"]
    assert redone, "the re-ingested batches name the redo"
    records = [r for r in history(lake.config, "clicks") if r.run_id == "fix-1"]
    assert records and {r.state for r in records} == {State.REOPENED}
    assert all("by alice" in (r.reason or "") and f"snapshot {lake.good}" in (r.reason or "") for r in records)
    # the stream resumes: new events exactly once, nothing twice
    produce(lake.config_path, "--start", "2026-11-20T12:00:00+00:00", "--hours", "1", "--events-per-hour", "200",
            "--events-per-file", "100", "--seed", "23")
    ingest(spark, lake.config_path)
    assert_exactly_once(lake.config_path)
    assert_checkpoint_matches(lake)


def test_redo_twice_gives_the_same_table(spark: Any, lake: Lake) -> None:
    assert redo_here(spark, lake.config_path, "--snapshot-id", str(lake.good), "--dry-run", "false",
                     "--run-id", "again-1") == 0
    first = table_content(lake)
    assert redo_here(spark, lake.config_path, "--snapshot-id", str(lake.good), "--dry-run", "false",
                     "--run-id", "again-2") == 0
    assert table_content(lake) == first
    assert_exactly_once(lake.config_path)
    assert_checkpoint_matches(lake)
    # a finished redo's run id is not taken again (only an interrupted redo is finished under its id)
    assert redo(lake.config_path, "--snapshot-id", str(lake.good), "--dry-run", "false", "--run-id", "again-1") == 2
    assert "a redo of clicks with this id has finished" in redo_log(lake.config_path)


def test_a_redo_killed_midway_finishes_when_run_again(spark: Any, lake: Lake) -> None:
    expected = table_content(lake)
    offset = len(redo_log(lake.config_path))
    proc = start_redo(lake.config_path, "--snapshot-id", str(lake.good), "--dry-run", "false", "--run-id", "kill-1")
    deadline = time.monotonic() + 300
    while "committed as snapshot" not in redo_log(lake.config_path)[offset:]:
        assert proc.poll() is None, redo_log(lake.config_path)
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    # run again with the same run id (the dead redo's lease is taken over at once on this host), it finishes
    assert redo_here(spark, lake.config_path, "--snapshot-id", str(lake.good), "--dry-run", "false",
                     "--run-id", "kill-1") == 0, redo_log(lake.config_path)
    assert table_content(lake) == expected
    assert_exactly_once(lake.config_path)
    assert_checkpoint_matches(lake)
    ingest(spark, lake.config_path)
    assert table_content(lake) == expected


def test_redo_stops_and_holds_the_live_writer(spark: Any, lake: Lake, tmp_path: Path) -> None:
    """A running writer is stopped between batches; while the redo runs no writer can start (exit 4, as the
    ingest DAG's restarts would be refused); afterwards the writer resumes exactly once."""
    expected = table_content(lake)
    writer = start_writer(lake.config_path, "continuous")
    wait_for_log(lake.config_path, "started in continuous mode", writer)
    good = load_catalog(lake.config.catalog).load_table(lake.stream.table).metadata.snapshot_by_id(lake.good)
    first = int(good.summary.additional_properties["laketide.batch-id"]) + 1
    faults = tmp_path / "faults"
    proc = start_redo(lake.config_path, "--snapshot-id", str(lake.good), "--dry-run", "false", "--run-id", "hold-1",
                      LAKETIDE_FAULT=f"batch_start:{first}", LAKETIDE_FAULT_DIR=str(faults),
                      LAKETIDE_FAULT_MODE="hold")
    assert writer.wait(timeout=240) == 0, writer_log(lake.config_path)  # stopped by the redo's stop file
    reached = faults / f"batch_start-{first}.reached"
    deadline = time.monotonic() + 240
    while not reached.exists():
        assert proc.poll() is None, redo_log(lake.config_path)
        assert time.monotonic() < deadline
        time.sleep(0.2)
    # the redo is re-ingesting: a writer (a restart by the ingest DAG) is refused
    assert run_writer(lake.config_path, timeout=120) == 4
    assert "already running" in writer_log(lake.config_path)
    reached.with_suffix(".release").touch()
    assert proc.wait(timeout=400) == 0, redo_log(lake.config_path)
    assert table_content(lake) == expected
    ingest(spark, lake.config_path)
    assert table_content(lake) == expected
    assert_exactly_once(lake.config_path)
    assert_checkpoint_matches(lake)


def test_dag_test_sends_the_form_params(lake: Lake, airflow_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dag.test()`` with the form's params: the schema refuses what it can, the validate task the rest (nothing
    changes); a dry run stops before Spark; a redo through the DAG restores a corrupted table and re-closes the
    hours it changed."""
    monkeypatch.setenv("LAKETIDE_CONFIG", str(lake.config_path))
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import ParamValidationError

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags["laketide_redo"]
    assert dag.params["dry_run"] is True and dag.max_active_runs == 1
    with pytest.raises(ParamValidationError, match="'nope' is not one of"):
        dag.test(run_conf={"stream": "nope", "snapshot_id": str(lake.good)})
    with pytest.raises(ParamValidationError):
        dag.test(run_conf={"stream": "clicks", "snapshot_id": "1; DROP TABLE lake.clicks"})
    with pytest.raises(ParamValidationError):  # a number: the form sends the id's digits as text, never rounded
        dag.test(run_conf={"stream": "clicks", "snapshot_id": lake.good})

    def task_states(run: Any) -> dict[str, str]:
        return {ti.task_id: ti.state for ti in run.get_task_instances()}

    before, ckpt = heads(lake), checkpoint_files(lake)
    run = dag.test(run_conf={"stream": "clicks", "snapshot_id": "12345"})
    assert run.state == "failed"
    assert task_states(run)["validate"] == "failed" and task_states(run)["redo"] == "upstream_failed"
    # as the trigger form does: every param, the empty ones as null
    form = {"stream": "clicks", "snapshot_id": None, "at": None, "start": None, "end": None, "dry_run": True}
    run = dag.test(run_conf={**form, "at": "2026-12-31T00:00:00+00:00"})
    assert run.state == "success"
    assert task_states(run) == {"validate": "success", "apply": "success", "redo": "skipped",
                                "reopened_clicks": "skipped", "reclose_clicks": "skipped"}
    assert heads(lake) == before and checkpoint_files(lake) == ckpt
    from laketide.redo import actions
    from laketide.redo.params import check_run_id

    def recorded(run: Any) -> list[str]:  # the action record's steps of a run (dry runs are recorded too)
        return [r.outcome for r in actions.records(lake.config, "clicks") if r.run_id == check_run_id(run.run_id)]

    assert recorded(run) == ["dry_run"]

    corrupt(lake)
    run = dag.test(run_conf={**form, "snapshot_id": str(lake.good), "dry_run": False})
    assert run.state == "success", task_states(run)
    assert recorded(run) == ["planned", "done"]
    assert_exactly_once(lake.config_path)
    assert_checkpoint_matches(lake)
    records = history(lake.config, "clicks")
    reopened = {r.partition for r in records if r.state == State.REOPENED and r.run_id and
                r.run_id.startswith("manual__")}
    closed = {r.partition for r in records if r.state == State.CLOSED and r.run_id == run.run_id}
    # the hours decided now are re-closed at once; an undecided one (the newest, its watermark not past it) stays
    # reopened for the close DAG's schedule
    from laketide.close.partitions import check_partitions

    decided = {c.partition for c in check_partitions(lake.config, lake.stream, sorted(reopened))
               if c.state in (State.COMPLETE, State.EMPTY)}
    assert reopened and closed and closed == decided


def test_a_table_rolled_back_by_hand_is_redone_from_its_current_snapshot(spark: Any, lake: Lake) -> None:
    """The writer refuses a checkpoint ahead of its table (rolled back by hand); a redo from the snapshot the table
    is at (``at`` = now) brings the checkpoint and the rejects table in line and ingests the rest again."""
    from datetime import UTC, datetime

    expected = table_content(lake)
    table = load_catalog(lake.config.catalog).load_table(lake.stream.table)
    table.manage_snapshots().set_current_snapshot(lake.good).commit()
    assert run_writer(lake.config_path) == 3
    assert "is ahead of the table" in writer_log(lake.config_path)
    time.sleep(0.01)
    assert redo_here(spark, lake.config_path, "--at", datetime.now(UTC).isoformat(), "--dry-run", "false",
                     "--run-id", "by-hand-1") == 0, redo_log(lake.config_path)
    assert table_content(lake) == expected
    assert_exactly_once(lake.config_path)
    assert_checkpoint_matches(lake)
    ingest(spark, lake.config_path)
    assert table_content(lake) == expected


def test_redo_on_postgresql(spark: Any, tmp_path: Path) -> None:
    """The same redo with the catalog (and the leases) on a real PostgreSQL server."""
    from tests.pg import PgCluster
    from tests.test_fencing import use_catalog

    cluster = PgCluster()
    cluster.start()
    try:
        config_path = use_catalog(write_config(tmp_path, catalog_name=unique_catalog("redo_pg"),
                                               max_files_per_trigger=3, live=False),
                                  cluster.createdb("catalog"))
        produce(config_path, "--start", START, "--hours", "1", "--events-per-hour", "200", "--events-per-file", "100",
                "--malformed-ratio", "0.05", "--seed", "31")
        ingest(spark, config_path)
        config = load(config_path)
        good = load_catalog(config.catalog).load_table("lake.clicks").metadata.current_snapshot_id
        assert good is not None
        produce(config_path, "--start", "2026-11-20T09:00:00+00:00", "--hours", "1", "--events-per-hour", "200",
                "--events-per-file", "100", "--malformed-ratio", "0.05", "--seed", "32")
        ingest(spark, config_path)
        lake = Lake(config_path, config, good)
        expected = table_content(lake)
        corrupt(lake)
        assert redo_here(spark, config_path, "--snapshot-id", str(good), "--dry-run", "false",
                         "--run-id", "pg-1") == 0, redo_log(config_path)
        assert table_content(lake) == expected
        assert_exactly_once(config_path)
        assert_checkpoint_matches(lake)
        produce(config_path, "--start", "2026-11-20T10:00:00+00:00", "--hours", "1", "--events-per-hour", "100",
                "--events-per-file", "100", "--seed", "33")
        ingest(spark, config_path)
        assert_exactly_once(config_path)
        assert_checkpoint_matches(lake)
    finally:
        cluster.destroy()
