"""End to end: the bundled producer lands events (with malformed and late lines), the real writer process
ingests them into real Iceberg tables on a real SQLite catalog, and every partition reconciles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from laketide.close.reconcile import reconcile
from laketide.ingest.landing import data_dir, expected_counts
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import BATCH_ID, PARTITION_ROWS, SOURCE_FILES, WATERMARK, WRITER_ID
from tests.helpers import ingest, load, run_writer, unique_catalog, write_config, writer_log

pytestmark = pytest.mark.slow

START = "2026-11-21T20:00:00+00:00"


def produce(config_path: Path, *args: str) -> None:
    """The bundled producer's backfill (``python -m laketide.dev.producer --mode backfill ...``), run in this
    process: its command line with ``config_path``."""
    from laketide.config.loading import _cached
    from laketide.dev import producer

    _cached.cache_clear()  # the configuration file may have changed since it was last read
    code = producer.main(["--config", str(config_path), "--mode", "backfill", *args])
    assert code == 0, f"the producer exited with {code}"


def landed(home: Path, **stream: object) -> Path:
    """4 hours of events, one of them quiet, with malformed and late lines, in many small files."""
    path = write_config(home, **stream)
    produce(path, "--start", START, "--hours", "4", "--events-per-hour", "1500", "--events-per-file", "250",
            "--malformed-ratio", "0.03", "--late-ratio", "0.05", "--late-by", "40m", "--quiet-hours", "2",
            "--seed", "11")
    return path


def assert_exactly_once(config_path: Path, name: str = "clicks") -> dict[str, int]:
    config = load(config_path)
    stream = config.stream(name)
    report = reconcile(config, stream)
    expected = expected_counts(stream.landing_path)
    assert expected, "the producer landed nothing"
    got = {p.partition: (p.audit, p.lake, p.rejects) for p in report.partitions}
    for part, count in expected.items():
        audit, lake, rejects = got[part]
        assert lake + rejects == count == audit, f"partition {part}: lake {lake} + rejects {rejects} != {count}"
    assert set(got) == set(expected), f"rows in partitions no producer reported: {set(got) - set(expected)}"
    assert report.duplicate_ids == {}
    assert report.unattributed_rejects == 0
    assert report.pending_files == []
    return {p.partition: p.lake for p in report.partitions}


def lineage_summaries(table: Any) -> list[dict[str, str]]:
    """Summaries of the table's current lineage that carry a writer marker, oldest first (the public commit
    path's first snapshot of a table is the empty one Iceberg makes for the first staging branch)."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    node, out = by_id.get(table.metadata.current_snapshot_id), []
    while node is not None:
        out.append(dict(node.summary.additional_properties))
        node = by_id.get(node.parent_snapshot_id) if node.parent_snapshot_id is not None else None
    return [s for s in out[::-1] if WRITER_ID in s]


def add_blank_lines(config_path: Path) -> None:
    """Stray blank lines (empty, spaces, a tab) in a landed file: not records, so no count changes."""
    path = sorted(data_dir(load(config_path).stream("clicks").landing_path).iterdir())[1]
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([b"", *lines[:3], b"   ", *lines[3:-1], b"\t", b""]))


@pytest.fixture(params=["internal", "public"])
def commit_path(request: pytest.FixtureRequest) -> str:
    """The writer's commit path (stream setting ``commit_path``)."""
    return str(request.param)


def test_end_to_end_exactly_once(spark: Any, tmp_path: Path, commit_path: str) -> None:
    config_path = landed(tmp_path, catalog_name=unique_catalog("e2e"), commit_path=commit_path)
    add_blank_lines(config_path)
    assert run_writer(config_path) == 0, writer_log(config_path)
    lake = assert_exactly_once(config_path)
    assert "2026-11-21T22:00:00+00:00" not in lake  # the quiet hour has no rows at all
    assert sum(lake.values()) > 4000

    # pyiceberg reads the tables the writer made: per-partition counts and the snapshot summaries
    config = load(config_path)
    stream = config.stream("clicks")
    catalog = load_catalog(config.catalog)
    events = catalog.load_table(stream.table)
    summaries = lineage_summaries(events)
    assert [int(s[BATCH_ID]) for s in summaries] == list(range(len(summaries)))
    assert all(s[WRITER_ID] == "clicks-writer" for s in summaries)
    files = sorted(f for s in summaries for f in json.loads(s[SOURCE_FILES]))
    assert files == sorted(p.name for p in data_dir(stream.landing_path).iterdir())
    rows: dict[str, int] = {}
    for s in summaries:
        for part, n in json.loads(s[PARTITION_ROWS]).items():
            rows[part] = rows.get(part, 0) + n
    assert rows == lake
    # one snapshot per batch (the public path: plus the empty first one, and no staging branch is left),
    # and every data file on disk is one the table references: the files of the rejected lines (null hour
    # partition of the internal pre-commit) were deleted, no pre-commit file is left over
    assert len(events.metadata.snapshots) == len(summaries) + (commit_path == "public")
    assert set(events.metadata.refs) == {"main"}
    assert f"({commit_path} commit path)" in writer_log(config_path)
    referenced = {urlparse(task.file.file_path).path for task in events.scan().plan_files()}
    on_disk = {str(f) for f in Path(urlparse(events.metadata.location).path, "data").rglob("*.parquet")}
    assert on_disk == referenced and not any("event_time_hour=null" in f for f in on_disk)
    newest = max(events.scan(selected_fields=("event_time",)).to_arrow()["event_time"].to_pylist())
    assert summaries[-1][WATERMARK] == newest.isoformat()  # the writer's watermark: newest event time
    rejects = catalog.load_table(stream.rejects_table).scan().to_arrow()
    assert rejects.num_rows > 0
    assert set(rejects.column_names) >= {"raw", "reason", "source_file", "event_hour", "batch_id"}
    assert all(r for r in rejects["reason"].to_pylist())

    # running again (here on this process's Spark session: tests.helpers.ingest) changes nothing: no new snapshot,
    # same counts
    before = events.metadata.current_snapshot_id
    ingest(spark, config_path)
    assert catalog.load_table(stream.table).metadata.current_snapshot_id == before
    assert assert_exactly_once(config_path) == lake


def test_lost_checkpoint_refuses_to_start_and_changes_nothing(spark: Any, tmp_path: Path) -> None:
    config_path = landed(tmp_path, catalog_name=unique_catalog("lost"))
    ingest(spark, config_path)
    config = load(config_path)
    stream = config.stream("clicks")
    catalog = load_catalog(config.catalog)
    before = {t: catalog.load_table(t).metadata_location for t in (stream.table, stream.rejects_table)}
    lake = assert_exactly_once(config_path)

    import shutil

    shutil.rmtree(stream.checkpoint_path)
    log_path = config_path.parent / "writer.log"
    log_path.unlink()
    assert run_writer(config_path) == 3
    log = writer_log(config_path)
    assert "refusing to start writer 'clicks-writer'" in log
    assert "missing or empty" in log and "laketide_redo" in log
    assert {t: catalog.load_table(t).metadata_location for t in before} == before
    assert assert_exactly_once(config_path) == lake
