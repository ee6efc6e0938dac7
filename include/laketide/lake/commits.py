"""The writer's commit protocol, as plain functions over snapshot summaries and checkpoint folders.

Every commit laketide's writer makes carries its markers in the Iceberg snapshot summary:

===========================  ==============================================================
``laketide.writer-id``       the stable, configured writer id (not Spark's query id)
``laketide.batch-id``        the Structured Streaming micro-batch id
``laketide.source-files``    JSON list of the landing files of the batch (the source position), sorted
``laketide.source-stats``    JSON list of ``[size, modification ms]`` of those files, in the same order
``laketide.min-event-time``  earliest valid event time in the batch (ISO, UTC), absent if none
``laketide.max-event-time``  latest valid event time in the batch
``laketide.watermark``       the writer's high watermark: latest valid event time committed so far, each batch's
                             capped at the writer's clock + ``max_clock_skew`` when it committed
``laketide.ahead-of-clock``  JSON {producer: latest event time} of producers whose events in the batch ran more
                             than ``max_clock_skew`` ahead of the writer's clock (absent when none did)
``laketide.partition-rows``  JSON {partition key: rows added} for this table
``laketide.valid-rows`` / ``laketide.rejected-rows``  row counts of the whole batch
``laketide.redo-id``         the redo run that re-ingested the batch (absent for the live writer's commits)
===========================  ==============================================================

Two phases: the data files are written first (pre-commit); the atomic catalog swap is the commit. A batch
is replayed after a crash; before writing, the writer looks up the last batch id this writer committed to
each table and skips a table whose batch is already there. Files of an attempt that never committed are
orphans for the cleaner.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laketide.errors import CheckpointMismatchError
from laketide.lake.snapshots import Snap, lineage

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

WRITER_ID = "laketide.writer-id"
BATCH_ID = "laketide.batch-id"
SOURCE_FILES = "laketide.source-files"
SOURCE_STATS = "laketide.source-stats"
MIN_EVENT_TIME = "laketide.min-event-time"
MAX_EVENT_TIME = "laketide.max-event-time"
WATERMARK = "laketide.watermark"
AHEAD_OF_CLOCK = "laketide.ahead-of-clock"
PARTITION_ROWS = "laketide.partition-rows"
VALID_ROWS = "laketide.valid-rows"
REJECTED_ROWS = "laketide.rejected-rows"
REDO_ID = "laketide.redo-id"
REDO_HINT = ("See docs/operations.md (checkpoint and table disagree): redo from a snapshot with the "
             "laketide_redo DAG, or reset the checkpoint and writer id deliberately.")


@dataclass(frozen=True)
class FileStat:
    """Size and modification time (ms since the epoch) of a landing file, as the writer recorded them."""

    size: int
    mtime_ms: int


def file_stat(path: Path) -> FileStat:
    st = path.stat()
    return FileStat(st.st_size, st.st_mtime_ns // 1_000_000)



@dataclass(frozen=True)
class Marker:
    """The newest commit of one writer found in a table's history."""

    snapshot_id: int
    batch_id: int
    summary: Mapping[str, str]

    @property
    def watermark(self) -> str | None:
        return self.summary.get(WATERMARK)


def is_marker(snap: Snap, writer_id: str) -> bool:
    """True when ``snap`` is a commit of ``writer_id`` (it carries a batch id)."""
    return snap.summary.get(WRITER_ID) == writer_id and BATCH_ID in snap.summary


def last_marker(chain: Iterable[Snap], writer_id: str) -> Marker | None:
    """The newest commit of ``writer_id`` in ``chain``: a lineage, newest first (``snapshots.lineage``).

    Only the current lineage counts: a batch in a rolled-back branch is not committed.
    """
    for snap in chain:
        if is_marker(snap, writer_id):
            return Marker(snap.snapshot_id, int(snap.summary[BATCH_ID]), dict(snap.summary))
    return None


def table_marker(catalog: SqlCatalog, table: str, writer_id: str) -> Marker | None:
    """The newest commit of ``writer_id`` in ``table``'s current lineage.

    Reads only the snapshots from the current one back to that commit (``snapshots.lineage``), so the cost is
    the number of other commits since this writer's last one, not the length of the table's history.
    """
    _, chain = lineage(catalog, table, lambda snap: is_marker(snap, writer_id))
    return last_marker(chain, writer_id)


def should_write(batch_id: int, marker: Marker | None) -> bool:
    """True when ``batch_id`` is not yet committed to the table (batches commit in order)."""
    return marker is None or batch_id > marker.batch_id


@dataclass(frozen=True)
class CheckpointState:
    """The last batch ids Spark recorded: planned (offsets log) and finished (commits log)."""

    last_offset: int | None
    last_commit: int | None


def _last_batch(folder: Path) -> int | None:
    if not folder.is_dir():
        return None
    ids = [int(p.name) for p in folder.iterdir() if p.name.isdigit()]
    return max(ids) if ids else None


def read_checkpoint(checkpoint: Path) -> CheckpointState:
    """Read the offsets and commits logs of a Structured Streaming checkpoint folder."""
    return CheckpointState(_last_batch(checkpoint / "offsets"), _last_batch(checkpoint / "commits"))


def check_checkpoint(
    table: str, writer_id: str, checkpoint: Path, state: CheckpointState, marker: Marker | None
) -> None:
    """Refuse to start when the checkpoint and the table disagree.

    Every batch commits to the events table (an empty commit when it had no valid rows), so the table's
    last batch B and the checkpoint must agree: Spark finished B (commits log = B), or B committed to Iceberg
    but the process died before Spark recorded it (commits log = B-1, offsets log = B: B is replayed and
    skipped). Anything else means a lost, reset or foreign checkpoint (starting would re-ingest data the
    table holds, or re-number batches) or a table rolled back under the checkpoint.
    """
    if marker is None:
        if state.last_commit is None:
            return
        raise CheckpointMismatchError(
            f"checkpoint {checkpoint} has finished batches up to {state.last_commit}, but table {table} "
            f"holds no commit of writer {writer_id!r} (table recreated or rolled back?). Starting would skip "
            f"those landing files. {REDO_HINT}"
        )
    b = marker.batch_id
    finished_b = state.last_commit == b
    replay_b = state.last_offset == b and (state.last_commit == b - 1 or (b == 0 and state.last_commit is None))
    if finished_b or replay_b:
        return
    if state.last_offset is None and state.last_commit is None:
        what = "is missing or empty (lost or reset)"
    elif (state.last_offset or -1) < b:
        what = f"is behind the table (its last batch is {state.last_offset}: an older or reset checkpoint)"
    else:
        what = f"is ahead of the table (finished batch {state.last_commit}: table rolled back?)"
    raise CheckpointMismatchError(
        f"refusing to start writer {writer_id!r}: table {table} has batch {b} committed "
        f"(snapshot {marker.snapshot_id}) but checkpoint {checkpoint} {what}. "
        f"Starting would duplicate or lose data. {REDO_HINT}"
    )


class SourceFiles(list[str]):
    """The landing files of a batch (sorted names) with the size and modification time Spark listed for
    each (``stats``): what ``laketide.lake.internals.batch_files`` returns and ``summary_properties`` records."""

    def __init__(self, stats: Mapping[str, FileStat | tuple[int, int]]) -> None:
        super().__init__(sorted(stats))
        self.stats = {n: s if isinstance(s, FileStat) else FileStat(*s) for n, s in stats.items()}


def summary_properties(
    writer_id: str, batch_id: int, source_files: list[str], partition_rows: Mapping[str, int],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Snapshot summary properties of one commit (all values are strings, as Iceberg stores them).

    ``source_files`` as :class:`SourceFiles` also records each file's size and modification time
    (``SOURCE_STATS``, about 22 bytes a file), so that a file changed after ingest can be told."""
    names = sorted(source_files)
    props = {
        WRITER_ID: writer_id,
        BATCH_ID: str(batch_id),
        SOURCE_FILES: json.dumps(names, separators=(",", ":")),
        PARTITION_ROWS: json.dumps(dict(sorted(partition_rows.items())), separators=(",", ":")),
    }
    stats = getattr(source_files, "stats", None)
    if stats is not None and all(name in stats for name in names):
        props[SOURCE_STATS] = json.dumps([[stats[n].size, stats[n].mtime_ms] for n in names], separators=(",", ":"))
    for key, value in (extra or {}).items():
        if value is not None:
            props[key] = str(value)
    return props


def source_position(summary: Mapping[str, str]) -> dict[str, FileStat | None]:
    """The landing files a commit recorded (``SOURCE_FILES``: a JSON list of names), each with the size and
    modification time recorded beside it (``SOURCE_STATS``; None for commits written before it existed)."""
    raw = summary.get(SOURCE_FILES)
    if not raw:
        return {}
    names = [str(n) for n in json.loads(raw)]
    stats: list[Any] = []
    if summary.get(SOURCE_STATS):
        try:
            stats = json.loads(summary[SOURCE_STATS])
        except ValueError:
            stats = []
    if len(stats) != len(names):
        return dict.fromkeys(names)
    return {n: FileStat(int(s[0]), int(s[1])) for n, s in zip(names, stats, strict=True)}


def ingested_files(summaries: Iterable[Mapping[str, str]]) -> dict[str, FileStat | None]:
    """Every landing file the commits of ``summaries`` recorded (newest first: a file's newest record wins)."""
    files: dict[str, FileStat | None] = {}
    for summary in summaries:
        for name, stat in source_position(summary).items():
            if files.get(name) is None:
                files[name] = stat
    return files


# ---- backfill and repair commits (``laketide.redo``)

#: what a backfill or repair commit was: ``backfill`` or ``repair``, and its id
ACTION = "laketide.action"
ACTION_ID = "laketide.action-id"
#: JSON list of the partition keys whose rows such a commit replaced
REPLACED_HOURS = "laketide.replaced-hours"
#: JSON {partition key: rows} of duplicate event ids a repair removed
DUPLICATES_REMOVED = "laketide.duplicates-removed"
#: JSON {partition key: rows} of events a writer with ``dedupe_on_write`` dropped (their id was already there)
DUPLICATES_DROPPED = "laketide.duplicates-dropped"


def duplicates_removed(summaries: Iterable[Mapping[str, str]]) -> dict[str, int]:
    """Rows per partition key removed or dropped as duplicate event ids by the commits of ``summaries`` (a
    lineage, newest first): the producers' audit records still count them, so the expected lake rows of an
    hour are audit - rejects - these.

    A backfill re-ingests its hours from the landing zone: the counts of older commits for those hours no longer
    apply (the walk stops counting them there)."""
    counts: dict[str, int] = {}
    replaced: set[str] = set()
    for summary in summaries:
        for key in (DUPLICATES_REMOVED, DUPLICATES_DROPPED):
            for hour, n in json.loads(summary.get(key) or "{}").items():
                if hour not in replaced:
                    counts[hour] = counts.get(hour, 0) + int(n)
        if summary.get(ACTION) == "backfill":
            replaced |= set(json.loads(summary.get(REPLACED_HOURS) or "[]"))
    return counts
