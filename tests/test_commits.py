"""The commit-idempotency decision and the checkpoint guard, as plain functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from laketide.errors import CheckpointMismatchError
from laketide.lake.commits import (
    BATCH_ID,
    WRITER_ID,
    CheckpointState,
    Marker,
    check_checkpoint,
    last_marker,
    read_checkpoint,
    should_write,
    summary_properties,
)
from laketide.lake.snapshots import Snap


def snap(sid: int, parent: int | None, writer: str | None = None, batch: int | None = None) -> Snap:
    summary = {"operation": "append"}
    if writer is not None:
        summary |= {WRITER_ID: writer, BATCH_ID: str(batch)}
    return Snap(sid, parent, sid, 1_700_000_000_000 + sid, summary)


def test_last_marker_is_the_newest_commit_of_the_writer_in_a_lineage() -> None:
    # a lineage, newest first: compaction (4) and another writer (3) committed after w's batch 1
    chain = [snap(4, 3), snap(3, 2, "other", 7), snap(2, 1, "w", 1), snap(1, None, "w", 0)]
    marker = last_marker(chain, "w")
    assert marker is not None and (marker.snapshot_id, marker.batch_id) == (2, 1)
    assert marker.summary[WRITER_ID] == "w"
    assert last_marker(chain, "nobody") is None
    assert last_marker([], "w") is None


def test_a_commit_without_batch_id_is_not_a_marker() -> None:
    chain = [Snap(2, 1, 2, 0, {WRITER_ID: "w"}), snap(1, None, "w", 0)]
    marker = last_marker(chain, "w")
    assert marker is not None and marker.snapshot_id == 1


def test_should_write() -> None:
    marker = Marker(10, 5, {})
    assert not should_write(4, marker)
    assert not should_write(5, marker)
    assert should_write(6, marker)
    assert should_write(0, None)


GOOD = [
    (None, CheckpointState(None, None)),  # fresh start
    (None, CheckpointState(0, None)),  # killed in batch 0 before any commit
    (Marker(1, 4, {}), CheckpointState(4, 4)),  # clean stop after batch 4
    (Marker(1, 4, {}), CheckpointState(5, 4)),  # batch 5 planned, not committed anywhere
    (Marker(1, 4, {}), CheckpointState(4, 3)),  # Iceberg has 4, Spark did not record it: replay + skip
    (Marker(1, 0, {}), CheckpointState(0, None)),  # the same for the very first batch
]


@pytest.mark.parametrize(("marker", "state"), GOOD)
def test_checkpoint_agrees(marker: Marker | None, state: CheckpointState) -> None:
    check_checkpoint("lake.t", "w", Path("/ckpt"), state, marker)


BAD = [
    (Marker(1, 4, {}), CheckpointState(None, None), "missing or empty"),
    (Marker(1, 4, {}), CheckpointState(1, 1), "behind the table"),
    (Marker(1, 4, {}), CheckpointState(7, 6), "ahead of the table"),
    (None, CheckpointState(3, 3), "holds no commit of writer"),
]


@pytest.mark.parametrize(("marker", "state", "why"), BAD)
def test_checkpoint_disagrees(marker: Marker | None, state: CheckpointState, why: str) -> None:
    with pytest.raises(CheckpointMismatchError) as err:
        check_checkpoint("lake.t", "w", Path("/ckpt"), state, marker)
    assert why in str(err.value)
    assert "laketide_redo" in str(err.value)


def test_read_checkpoint(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / "absent") == CheckpointState(None, None)
    for name in ("0", "1", "2", ".2.crc"):
        (tmp_path / "offsets").mkdir(exist_ok=True)
        (tmp_path / "offsets" / name).write_text("v1")
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "1").write_text("v1")
    assert read_checkpoint(tmp_path) == CheckpointState(2, 1)


def test_summary_properties_are_strings() -> None:
    props = summary_properties("w", 3, ["b.jsonl", "a.jsonl"], {"2026-11-22T03:00:00+00:00": 5},
                               {"laketide.valid-rows": 5, "laketide.watermark": None})
    assert props[WRITER_ID] == "w" and props[BATCH_ID] == "3"
    assert json.loads(props["laketide.source-files"]) == ["a.jsonl", "b.jsonl"]
    assert json.loads(props["laketide.partition-rows"]) == {"2026-11-22T03:00:00+00:00": 5}
    assert props["laketide.valid-rows"] == "5"
    assert "laketide.watermark" not in props


def test_source_position_records_sizes_and_times_and_reads_the_old_format() -> None:
    from laketide.lake.commits import SOURCE_FILES, SOURCE_STATS, FileStat, SourceFiles, ingested_files, source_position

    files = SourceFiles({"b.jsonl": (20, 1700000000123), "a.jsonl": FileStat(10, 1700000000000)})
    assert files == ["a.jsonl", "b.jsonl"] and len(files) == 2
    props = summary_properties("w", 3, files, {})
    assert json.loads(props[SOURCE_FILES]) == ["a.jsonl", "b.jsonl"]  # unchanged: a JSON list of names
    assert json.loads(props[SOURCE_STATS]) == [[10, 1700000000000], [20, 1700000000123]]
    assert source_position(props) == {"a.jsonl": FileStat(10, 1700000000000), "b.jsonl": FileStat(20, 1700000000123)}
    # a plain list (and commits written before the sizes were recorded) reads as names without sizes
    old = summary_properties("w", 2, ["c.jsonl"], {})
    assert SOURCE_STATS not in old
    assert source_position(old) == {"c.jsonl": None}
    assert source_position({SOURCE_FILES: '["c.jsonl"]', SOURCE_STATS: "[[1, 2], [3, 4]]"}) == {"c.jsonl": None}
    assert source_position({}) == {}
    # newest first: the newest record of a file wins
    assert ingested_files([props, old, summary_properties("w", 1, SourceFiles({"a.jsonl": (1, 1)}), {})]) == {
        "a.jsonl": FileStat(10, 1700000000000), "b.jsonl": FileStat(20, 1700000000123), "c.jsonl": None}
    # a batch of 100 files costs about 8 KB of summary
    many = SourceFiles({f"20261122T03-sample-web01-{i:08d}-9a84ed0a.jsonl": (123456, 1763780000000 + i)
                        for i in range(100)})
    assert len(json.dumps(summary_properties("w", 1, many, {}))) < 9000
