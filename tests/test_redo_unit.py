"""The redo's plain functions without Spark: param checks, snapshot resolution, the rejects table's target, S's
position, and the checkpoint rebuilt at it (files checked line by line; a real writer resuming from it is in
tests/test_redo.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from laketide.errors import CheckpointFormatError, RequestError
from laketide.lake.commits import BATCH_ID, SOURCE_FILES, SOURCE_STATS, WRITER_ID, FileStat
from laketide.lake.snapshots import table_lineage
from laketide.redo import checkpoint
from laketide.redo.params import (
    HourRange,
    check_flag,
    check_hour,
    check_identifier,
    check_range,
    check_run_id,
    resolve_snapshot,
)
from laketide.redo.plan import EMPTY, position, rejects_target

H = [datetime(2026, 11, 20, h, tzinfo=UTC) for h in range(8, 12)]


def test_param_checks() -> None:
    assert check_identifier("clicks_2", "table") == "clicks_2"
    for bad in ("lake.clicks", "x; DROP TABLE y", "1abc", "", None, "a b", "t'--"):
        with pytest.raises(RequestError, match="not a plain identifier"):
            check_identifier(bad, "table")
    assert check_hour("2026-11-20T09:00:00+01:00", "start") == H[0]
    with pytest.raises(RequestError, match="not the start of an hour"):
        check_hour("2026-11-20T09:15:00+00:00", "start")
    assert check_range("", None, H) == HourRange(None, None)
    assert check_range(H[1].isoformat(), H[3].isoformat(), H) == HourRange(H[1], H[3])
    assert H[2] in check_range(H[1].isoformat(), None, H) and H[0] not in check_range(H[1].isoformat(), None, H)
    assert check_range(None, "2026-11-20T12:00:00+00:00", H).end == datetime(2026, 11, 20, 12, tzinfo=UTC)
    with pytest.raises(RequestError, match="outside the table"):
        check_range(None, "2026-11-20T13:00:00+00:00", H)
    with pytest.raises(RequestError, match="outside the table"):
        check_range("2026-11-20T07:00:00+00:00", None, H)
    with pytest.raises(RequestError, match="must be before end"):
        check_range(H[2].isoformat(), H[2].isoformat(), H)
    with pytest.raises(RequestError, match="holds no hour yet"):
        check_range(H[0].isoformat(), None, [])
    assert check_run_id("manual__2026-11-22T21:00:00+00:00") == "manual__2026-11-22T21_00_00_00_00"
    assert check_run_id("../../etc") == ".._.._etc"
    with pytest.raises(RequestError):
        check_run_id("")
    assert check_flag("TRUE", "dry_run") is True and check_flag(False, "dry_run") is False
    with pytest.raises(RequestError, match="not true or false"):
        check_flag(1, "dry_run")


def _marker(batch: int, files: dict[str, tuple[int, int]] | None = None) -> dict[str, str]:
    names = sorted(files or {})
    props = {WRITER_ID: "w", BATCH_ID: str(batch), SOURCE_FILES: json.dumps(names)}
    if files:
        props[SOURCE_STATS] = json.dumps([list(files[n]) for n in names])
    return props


@pytest.fixture()
def tables(tmp_path: Path) -> Any:
    """An events-like and a rejects-like table with writer commits (and one foreign append) made by pyiceberg."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("lake")
    schema = pa.schema([pa.field("event_id", pa.string())])
    events = catalog.create_table("lake.events", schema)
    rejects = catalog.create_table("lake.rejects", schema)

    def add(table: Any, ids: list[str], props: dict[str, str]) -> int:
        table.append(pa.Table.from_pylist([{"event_id": i} for i in ids], schema=schema), snapshot_properties=props)
        return int(table.metadata.current_snapshot_id)

    e0 = add(events, ["a"], _marker(0, {"f0.jsonl": (10, 1000)}))
    e1 = add(events, ["b"], _marker(1, {"f1.jsonl": (11, 2000), "f2.jsonl": (12, 3000)}))
    add(rejects, ["x"], _marker(1, {"f1.jsonl": (11, 2000)}))
    e2 = add(events, ["c"], _marker(2, {"f3.jsonl": (13, 4000)}))
    r3 = add(rejects, ["y"], _marker(3, {"f4.jsonl": (14, 5000)}))
    e3 = add(events, ["d"], _marker(3, {"f4.jsonl": (14, 5000)}))
    bad = add(events, ["zzz"], {"note": "wrong rows"})
    return events, rejects, [e0, e1, e2, e3, bad], r3


def test_position_resolution_and_rejects_target(tables: Any) -> None:
    events, rejects, (e0, e1, e2, e3, bad), r3 = tables
    chain, complete = table_lineage(events, e1)
    assert [s.snapshot_id for s in chain] == [e1, e0] and complete
    batch, files = position(chain, "w")
    assert batch == 1 and files == {"f0.jsonl": FileStat(10, 1000), "f1.jsonl": FileStat(11, 2000),
                                    "f2.jsonl": FileStat(12, 3000)}
    assert position(table_lineage(events, bad)[0], "w")[0] == 3  # a foreign append carries no marker
    assert rejects_target(rejects, "w", 3) == r3
    first = rejects.metadata.snapshots[0].snapshot_id
    assert rejects_target(rejects, "w", 2) == first and rejects_target(rejects, "w", 1) == first
    assert rejects_target(rejects, "w", 0) == EMPTY and rejects_target(rejects, "w", None) == EMPTY
    assert rejects_target(None, "w", 3) is None

    assert resolve_snapshot(events, e2, None) == e2
    assert resolve_snapshot(events, str(e2), "") == e2
    at = datetime.fromtimestamp(events.metadata.snapshot_by_id(e3).timestamp_ms / 1000, UTC)
    assert resolve_snapshot(events, None, at.isoformat()) in (e3, bad)  # same millisecond possible
    with pytest.raises(RequestError, match="not in the history"):
        resolve_snapshot(events, 42, None)
    with pytest.raises(RequestError, match="exactly one"):
        resolve_snapshot(events, None, None)
    with pytest.raises(RequestError, match="is not a snapshot id"):
        resolve_snapshot(events, True, None)


def _old_checkpoint(root: Path, data: Path) -> Path:
    old = root / "ckpt"
    (old / "sources" / "0").mkdir(parents=True)
    (old / "offsets").mkdir()
    (old / "commits").mkdir()
    (old / "metadata").write_text('{"id":"query-1"}')
    entry = {"path": (data / "f0.jsonl").as_uri(), "timestamp": 999, "batchId": 0}
    (old / "sources" / "0" / "0").write_text("v1\n" + json.dumps(entry))
    later = {"path": (data / "f9.jsonl").as_uri(), "timestamp": 5, "batchId": 1}
    (old / "sources" / "0" / "1").write_text("v1\n" + json.dumps(later))
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"spark.sql.shuffle.partitions": "2"}}
    for b in (0, 1):
        (old / "offsets" / str(b)).write_text(f"v1\n{json.dumps(meta)}\n{{\"logOffset\":{b}}}")
        (old / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return old


def test_checkpoint_rebuilt_at_a_position(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("f0.jsonl", "f1.jsonl", "f9.jsonl"):
        (data / name).write_text("{}\n")
    old = _old_checkpoint(tmp_path, data)
    position = {"f0.jsonl": FileStat(3, 999), "f1.jsonl": None, "gone.jsonl": None}
    backup = checkpoint.replace(old, "run-1", 7, position, data)
    assert backup == tmp_path / "ckpt.redo-run-1" and (backup / "sources" / "0" / "1").is_file()
    assert sorted(p.name for p in (old / "offsets").iterdir()) == ["6", "7"]
    assert [p.name for p in (old / "commits").iterdir()] == ["7"]
    assert json.loads((old / "metadata").read_text()) == {"id": "query-1"}
    lines = (old / "offsets" / "7").read_text().splitlines()
    assert lines[0] == "v1" and json.loads(lines[1])["conf"] == {"spark.sql.shuffle.partitions": "2"}
    assert json.loads(lines[2]) == {"logOffset": 0}
    entries = [json.loads(x) for x in (old / "sources" / "0" / "0").read_text().splitlines()[1:]]
    assert entries == [{"path": (data / "f0.jsonl").as_uri(), "timestamp": 999, "batchId": 0},
                       {"path": (data / "f1.jsonl").resolve().as_uri(),
                        "timestamp": (data / "f1.jsonl").stat().st_mtime_ns // 1_000_000, "batchId": 0}]
    # run again (after a kill): the backup stays the original, the checkpoint is rebuilt the same way
    first = {p.relative_to(old): p.read_bytes() for p in old.rglob("*") if p.is_file()}
    checkpoint.replace(old, "run-1", 7, position, data)
    assert {p.relative_to(old): p.read_bytes() for p in old.rglob("*") if p.is_file()} == first
    assert (backup / "sources" / "0" / "1").is_file() and not checkpoint.building_path(old, "run-1").exists()
    # before the writer's first batch: an empty checkpoint (the writer starts at batch 0)
    checkpoint.replace(old, "run-2", None, {}, data)
    assert [p.name for p in old.iterdir()] == ["metadata"]
    (backup / "offsets" / "1").write_text("v2\n{}")
    with pytest.raises(CheckpointFormatError, match="expected 'v1'"):
        checkpoint.build(backup, tmp_path / "x", 3, position, data)


def test_every_manual_action_defaults_to_a_dry_run(tmp_path: Path) -> None:
    """Backfill and repair by hand, like their DAG forms and the redo job: a dry run unless told otherwise."""
    from laketide.redo import cli
    from laketide.redo.overwrite import validate_request
    from tests.helpers import load, write_config

    for kind in ("backfill", "repair"):
        given = ["--stream", "clicks", "--start", "2026-11-22T03:00:00+00:00", "--end", "2026-11-22T04:00:00+00:00"]
        assert cli.arguments(kind, given).dry_run == "true"
        assert cli.arguments(kind, [*given, "--dry-run"]).dry_run == "true"
        assert cli.arguments(kind, [*given, "--dry-run", "false"]).dry_run == "false"
    config = load(write_config(tmp_path))
    hours = ("2026-11-22T03:00:00+00:00", "2026-11-22T04:00:00+00:00")
    assert validate_request(config, "repair", "clicks", *hours).dry_run
