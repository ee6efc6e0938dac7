"""The commit-idempotency decision and the checkpoint guard, as plain functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from laketide.errors import CheckpointFormatError, CheckpointMismatchError
from laketide.lake.commits import (
    BATCH_ID,
    WRITER_ID,
    CheckpointState,
    Marker,
    check_checkpoint,
    check_replay,
    checkpoint_problems,
    last_marker,
    read_checkpoint,
    recovery_command,
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


def checkpoint(root: Path, offsets: dict[int, int | None], commits: list[int], sources: list[str]) -> Path:
    """A checkpoint folder as Spark 3.5 writes it: ``offsets/<batch>`` naming the file source's log batch
    (``logOffset``; None: ``-``), ``commits/<batch>``, and the file source's log files (``N`` or ``N.compact``)."""
    root.mkdir(parents=True)
    (root / "metadata").write_text('{"id":"q"}')
    for folder in ("offsets", "commits", "sources/0"):
        (root / folder).mkdir(parents=True)
    for batch, log in offsets.items():
        source = "-" if log is None else json.dumps({"logOffset": log})
        (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{source}')
        (root / "offsets" / f".{batch}.crc").write_text("")
    for batch in commits:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    for name in sources:
        (root / "sources" / "0" / name).write_text('v1\n{"path":"file:///l/data/a.jsonl","timestamp":1,"batchId":0}')
    return root


#: (table's newest batch, offsets {batch: logOffset}, commits, file source log files)
GOOD = {
    "fresh start": (None, {}, [], []),
    "fresh start, the first files logged before offsets/0": (None, {}, [], ["0"]),
    "killed in batch 0 before any commit": (None, {0: 0}, [], ["0"]),
    "clean stop after batch 4": (4, {3: 2, 4: 3}, [3, 4], ["0", "1", "2", "3"]),
    "batch 4 without new files": (4, {3: 3, 4: 3}, [3, 4], ["0", "1", "2", "3"]),
    "batch 5 planned, committed nowhere": (4, {3: 2, 4: 3, 5: 4}, [3, 4], ["0", "1", "2", "3", "4"]),
    "Iceberg has 4, Spark did not record it: replay and skip": (4, {3: 2, 4: 3}, [3], ["0", "1", "2", "3"]),
    "the same for the very first batch": (0, {0: 0}, [], ["0"]),
    "the source logged the next files before offsets/5": (4, {3: 2, 4: 3}, [3, 4], ["0", "1", "2", "3", "4"]),
    "compacted, older log files deleted": (30, {29: 21, 30: 22}, [29, 30], ["19.compact", "20", "21", "22"]),
    "replay of a batch whose log batch was compacted since": (30, {29: 18, 30: 19}, [29],
                                                              ["19.compact", "20"]),
    "purged: older commits kept than offsets": (130, {129: 100, 130: 101}, [28, 29, 129, 130],
                                                ["99.compact", "100", "101"]),
    "rebuilt by a redo": (7, {6: 0, 7: 0}, [7], ["0"]),
    "rebuilt by a redo at batch 0": (0, {0: 0}, [0], ["0"]),
}


@pytest.mark.parametrize("case", GOOD)
def test_checkpoint_agrees(tmp_path: Path, case: str) -> None:
    batch, offsets, done, sources = GOOD[case]
    marker = None if batch is None else Marker(1, batch, {})
    root = checkpoint(tmp_path / "ckpt", offsets, done, sources)
    assert checkpoint_problems(read_checkpoint(root), batch) == []
    check_checkpoint("lake.t", "w", root, read_checkpoint(root), marker, "clicks")


#: (table's newest batch, offsets, commits, file source log files, what the refusal names)
BAD = {
    "checkpoint lost": (4, None, [], [], "offsets/ (the batches Spark planned) is missing or empty"),
    "offsets/ deleted": (4, {}, [3, 4], ["0", "1", "2", "3"], "offsets/ (the batches Spark planned) is missing"),
    "the newest two commits deleted": (4, {3: 2, 4: 3}, [1, 2], ["0", "1", "2", "3"], "commits/ (the batches Spark "
                                       "finished) ends at batch 2: its newest entries are missing"),
    "commits/ deleted": (4, {3: 2, 4: 3}, [], ["0", "1", "2", "3"], "commits/ (the batches Spark finished) is "
                         "missing or empty"),
    "sources/ deleted": (4, {3: 2, 4: 3}, [3, 4], [], "sources/0/ (the file source's log of the files it has taken) "
                         "is missing or empty, while offsets/4 names its log batch 3"),
    "the log batch offsets/4 names deleted": (4, {3: 2, 4: 3}, [3, 4], ["0", "1", "2"], "sources/0/ lacks log "
                                              "batch(es) 3, which offsets/4 needs"),
    "a replayed batch's log batch deleted": (4, {3: 1, 4: 3}, [3], ["0", "1", "3"],
                                             "sources/0/ lacks log batch(es) 2, which offsets/4 needs"),
    "a hole in the source log": (4, {3: 2, 4: 3}, [3, 4], ["0", "2", "3"], "sources/0/ lacks log batch(es) 1 (its "
                                 "files from 0 to 3 must all be there)"),
    "offsets renumbered from 0 after a live rm -rf": (4, {0: 4}, [0], ["4"], "offsets/ ends at batch 0: behind"),
    "rm -rf under the writer, Spark wrote on": (6, {6: 5}, [6], ["5"], "offsets/ lacks batch 5"),
    "an older checkpoint": (4, {0: 0, 1: 1}, [0, 1], ["0", "1"], "ends at batch 1"),
    "table rolled back": (4, {6: 5, 7: 6}, [6, 7], ["0", "1", "2", "3", "4", "5", "6"],
                          "commits/ is ahead of the table"),
    "offsets ahead": (4, {4: 3, 5: 4, 6: 5}, [4], ["0", "1", "2", "3", "4", "5"], "offsets/ is ahead of the table"),
    "offsets of the replayed batch missing": (4, {2: 1, 3: 2}, [3], ["0", "1", "2"], "offsets/ ends at batch 3"),
    "a commit without its offsets": (4, {3: 2, 4: 3, 6: 3}, [3, 4, 5, 6], ["0", "1", "2", "3"],
                                     "commits/ has batch(es) 5 that offsets/ lacks"),
    "no table commit, finished batches": (None, {2: 2, 3: 3}, [2, 3], ["0", "1", "2", "3"],
                                          "commits/ has finished batches up to 3, but the table holds no commit"),
    "no table commit, planned batches": (None, {0: 0, 1: 1}, [], ["0", "1"], "offsets/ holds batch(es) 0-1"),
}


@pytest.mark.parametrize("case", BAD)
def test_checkpoint_disagrees(tmp_path: Path, case: str) -> None:
    batch, offsets, done, sources, why = BAD[case]
    marker = None if batch is None else Marker(111, batch, {}, current_id=222)
    root = tmp_path / "ckpt"
    if offsets is not None:
        checkpoint(root, offsets, done, sources)
    with pytest.raises(CheckpointMismatchError) as err:
        check_checkpoint("lake.t", "w", root, read_checkpoint(root), marker, "clicks")
    text = str(err.value)
    assert why in text, text
    assert "refusing to start writer 'w' of stream 'clicks'" in text and str(root) in text
    assert "laketide_redo" in text
    assert "\n" not in text  # one line: it reaches the group's log through Spark's error text
    if marker is not None:  # the command that recovers: a redo to the table's current snapshot
        assert f"batch {batch} of writer 'w' (snapshot 111)" in text
        assert "./laketide redo --stream clicks --snapshot-id 222 --apply" in text


def test_the_recovery_command_is_the_cli_s() -> None:
    """The refusal's command parses with ``./laketide``'s own parser as an applied redo to that snapshot."""
    from laketide.cli import parser

    words = recovery_command("clicks", 4711).split()
    assert words[0] == "./laketide"
    args = parser().parse_args(words[1:])
    assert (args.command, args.stream, args.snapshot_id, args.apply) == ("redo", "clicks", "4711", True)


def test_a_replay_is_skipped_only_with_the_committed_files() -> None:
    marker = Marker(10, 5, summary_properties("w", 5, ["a.jsonl", "b.jsonl"], {}), current_id=12)
    check_replay("clicks", "lake.t", 5, marker, ["b.jsonl", "a.jsonl"], 12)  # Spark's replay of batch 5: skipped
    cases = {
        "renumbered, other files": (5, ["c.jsonl"], "recorded other landing files than this batch holds"),
        "renumbered, more files": (5, ["a.jsonl", "b.jsonl", "c.jsonl"], "recorded other landing files"),
        "renumbered, fewer files": (5, ["a.jsonl"], "recorded other landing files"),
        "an older batch": (2, ["a.jsonl"], "batch 2 is older than the table's newest batch 5"),
    }
    for case, (batch, files, why) in cases.items():
        with pytest.raises(CheckpointMismatchError) as err:
            check_replay("clicks", "lake.t", batch, marker, files, 12)
        text = str(err.value)
        assert why in text, case
        assert f"stream 'clicks', batch {batch} of table lake.t" in text
        assert "./laketide redo --stream clicks --snapshot-id 12 --apply" in text
    with pytest.raises(CheckpointMismatchError, match=r"mark 1 landing file\(s\) as read that are not in the "
                                                      r"table: c.jsonl"):
        check_replay("clicks", "lake.t", 5, marker, ["a.jsonl", "c.jsonl"], None)


def test_read_checkpoint(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / "absent") == CheckpointState()
    root = checkpoint(tmp_path / "c", {0: 0, 1: 0, 2: 1}, [1], ["0", "1", "9.compact"])
    (root / "commits" / ".1.crc").write_text("")
    (root / "sources" / "0" / ".2.1234.tmp").write_text("")
    state = read_checkpoint(root)
    assert state == CheckpointState((0, 1, 2), (1,), {1: 0, 2: 1}, (0, 1, 9), (9,))
    assert (state.last_offset, state.last_commit) == (2, 1)
    (root / "offsets" / "3").write_text('v2\n{}\n{"logOffset":1}')
    with pytest.raises(CheckpointFormatError, match="version 'v2'"):
        read_checkpoint(root)
    (root / "offsets" / "3").write_text('v1\n{}\n{"offset":1}')
    with pytest.raises(CheckpointFormatError, match="not a file source's offset"):
        read_checkpoint(root)


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
