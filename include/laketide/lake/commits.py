"""The writer's commit protocol, as plain functions over snapshot summaries and checkpoint folders.

Every commit laketide's writer makes carries its markers in the Iceberg snapshot summary:

===========================  ==============================================================
``laketide.writer-id``       the stable, configured writer id (not Spark's query id)
``laketide.batch-id``        the Structured Streaming micro-batch id
``laketide.source-files``    JSON list of the landing files of the batch (the source position), sorted
``laketide.source-stats``    JSON list of ``[size, modification ms, content hash]`` of those files, in the same
                             order (the hash: :func:`content_hash` of the bytes read; older commits have none)
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
each table and skips a table whose batch is already there, once it has checked that it is the same batch (the
newest, with the files that commit recorded: :func:`check_replay`). Files of an attempt that never committed are
orphans for the cleaner. Before a writer starts, :func:`check_checkpoint` compares Spark's checkpoint with the
table's newest batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laketide.errors import CheckpointMismatchError
from laketide.lake import checkpoint_log
from laketide.lake.file_stats import FileStat
from laketide.lake.snapshots import Snap, lineage, lineage_summaries

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

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
#: an upsert stream's merged-table commit: the keys it changed, by the operation of their newest change (JSON
#: object: {"insert": 3, "update": 12, "delete": 1}; ``ingest.merge_sink``)
OPERATIONS = "laketide.operations"
REDO_HINT = ("See docs/operations.md (checkpoint and table disagree): redo from a snapshot with the "
             "laketide_redo DAG, or reset the checkpoint and writer id deliberately.")


@dataclass(frozen=True)
class Marker:
    """The newest commit of one writer found in a table's history."""

    snapshot_id: int
    batch_id: int
    summary: Mapping[str, str]
    #: the table's current snapshot when the marker was read (a redo to it rebuilds the checkpoint), if known
    current_id: int | None = None

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
    current, chain = lineage(catalog, table, lambda snap: is_marker(snap, writer_id))
    marker = last_marker(chain, writer_id)
    return None if marker is None else replace(marker, current_id=current)


def should_write(batch_id: int, marker: Marker | None) -> bool:
    """True when ``batch_id`` is not yet committed to the table (batches commit in order)."""
    return marker is None or batch_id > marker.batch_id


@dataclass(frozen=True)
class CheckpointState:
    """What a Structured Streaming checkpoint holds (``checkpoint_log`` reads it): the batch ids of its offsets
    log (batches planned) and commits log (batches finished), the file source's log batches that the newest
    offsets entries name (``logOffset``, by query batch), and the file source's own log files."""

    offsets: tuple[int, ...] = ()
    commits: tuple[int, ...] = ()
    #: query batch -> the file source's log batch its offsets entry names (the newest two entries)
    log_offsets: Mapping[int, int | None] = field(default_factory=dict)
    #: the file source's log batches with a file (plain or compacted), and the compacted ones
    source: tuple[int, ...] = ()
    compacted: tuple[int, ...] = ()

    @property
    def last_offset(self) -> int | None:
        return self.offsets[-1] if self.offsets else None

    @property
    def last_commit(self) -> int | None:
        return self.commits[-1] if self.commits else None


def read_checkpoint(checkpoint: Path) -> CheckpointState:
    """Read the offsets, commits and file-source logs of a Structured Streaming checkpoint folder.

    :raises CheckpointFormatError: an offsets entry that is not Spark 3.5's
    """
    offsets = checkpoint_log.batch_ids(checkpoint / "offsets")
    source, compacted = checkpoint_log.source_batches(checkpoint)
    return CheckpointState(
        tuple(offsets), tuple(checkpoint_log.batch_ids(checkpoint / "commits")),
        {b: checkpoint_log.log_offset(checkpoint, b) for b in offsets[-2:]}, tuple(source), tuple(compacted))


def _ids(ids: Iterable[int]) -> str:
    """Batch ids as a short text: ``3``, ``3-5``, ``1, 3, 7-9``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _source_problems(state: CheckpointState) -> list[str]:
    """What the file source's log lacks: the log batches the newest offsets entry (and, for a batch to replay, the
    one before it) name, and the files from its newest compacted one (or from 0) to its newest one. A log ahead of
    the offsets is legal: Spark writes the files it takes next before the offsets entry that names them."""
    last = state.last_offset
    if last is None:
        return []
    needed_to = state.log_offsets.get(last)
    if needed_to is None:
        return []
    replay = state.last_commit is None or state.last_commit < last
    needed_from = needed_to
    if replay:  # the batch to replay reads the log batches after the previous offsets entry's, to its own
        previous = state.log_offsets.get(last - 1) if last > 0 else -1
        if previous is not None:  # else offsets/ lacks the entry before the last (a problem of its own)
            needed_from = previous + 1
    ids, compacted = list(state.source), list(state.compacted)
    missing = [b for b in range(needed_from, needed_to + 1) if not checkpoint_log.covered(b, ids, compacted)]
    problems = []
    if not ids:
        problems.append(f"sources/0/ (the file source's log of the files it has taken) is missing or empty, while "
                        f"offsets/{last} names its log batch {needed_to}")
    elif missing:
        problems.append(f"sources/0/ lacks log batch(es) {_ids(missing)}, which offsets/{last} needs")
    if ids:
        first = max(compacted) if compacted else 0
        holes = sorted(set(range(first, ids[-1] + 1)) - set(ids) - set(missing))
        if holes:
            problems.append(f"sources/0/ lacks log batch(es) {_ids(holes)} (its files from "
                            f"{'the newest compacted one' if compacted else '0'} to {ids[-1]} must all be there)")
    return problems


def checkpoint_problems(state: CheckpointState, batch: int | None) -> list[str]:
    """What a checkpoint lacks or holds wrongly against the table, whose newest commit of the writer is batch
    ``batch`` (None: no commit); ``[]`` when they agree.

    Legal states (every batch commits to the events table, an empty commit when it had no valid rows):

    * finished: ``commits/`` ends at B; ``offsets/`` ends at B, or at B+1 (planned, committed nowhere yet);
    * B committed to Iceberg but not recorded by Spark (killed in between): ``commits/`` ends at B-1 (or is empty
      when B is 0) and ``offsets/`` at B: Spark replays B, the sink finds it committed (with the same files) and
      skips it;
    * no commit yet: no ``commits/`` entry, ``offsets/`` empty or holding batch 0 only.

    In each, ``offsets/`` also holds the entry before its last (Spark reads both to restart), every ``commits/``
    entry in the range ``offsets/`` keeps has its ``offsets/`` entry (Spark purges both logs at the same
    threshold), and the file source's log (``sources/0``) holds the log batches the last ``offsets/`` entry
    reads (see :func:`_source_problems`). Anything else is a lost, damaged, older or foreign checkpoint (starting
    would skip landing files as "already committed", or re-ingest them) or a table rolled back under it.
    """
    offsets, done = state.offsets, state.commits
    last_offset, last_commit = state.last_offset, state.last_commit
    problems: list[str] = []
    if batch is None:
        if last_commit is not None:
            problems.append(f"commits/ has finished batches up to {last_commit}, but the table holds no commit of "
                            "the writer (table recreated or rolled back?)")
        if offsets and offsets != (0,):
            problems.append(f"offsets/ holds batch(es) {_ids(offsets)}, but the table holds no commit of the writer")
    else:
        if not offsets:
            problems.append("offsets/ (the batches Spark planned) is missing or empty")
        if last_commit is not None and last_commit > batch:
            problems.append(f"commits/ is ahead of the table: it ends at batch {last_commit} (table rolled back?)")
        elif last_commit == batch or last_commit == batch - 1 or (last_commit is None and batch == 0):
            wanted = (batch, batch + 1) if last_commit == batch else (batch, batch)
            if last_offset is not None and last_offset < wanted[0]:
                problems.append(f"offsets/ ends at batch {last_offset}: behind the table (an older or reset "
                                "checkpoint)")
            elif last_offset is not None and last_offset > wanted[1]:
                problems.append(f"offsets/ is ahead of the table: it ends at batch {last_offset}")
        else:
            ends = "is missing or empty" if last_commit is None else f"ends at batch {last_commit}"
            problems.append(f"commits/ (the batches Spark finished) {ends}: its newest entries are missing, or it "
                            "is older than the table")
            if last_offset is not None and last_offset < batch:
                problems.append(f"offsets/ ends at batch {last_offset}: behind the table (an older or reset "
                                "checkpoint)")
    if last_offset is not None and last_offset > 0 and last_offset - 1 not in offsets:
        problems.append(f"offsets/ lacks batch {last_offset - 1} (Spark needs the entry before the last)")
    if offsets:
        unplanned = [c for c in done if c >= offsets[0] and c not in offsets]
        if unplanned:
            problems.append(f"commits/ has batch(es) {_ids(unplanned)} that offsets/ lacks")
    problems += _source_problems(state)
    return problems


def recovery_command(stream: str, snapshot_id: int | None) -> str:
    """The command that rebuilds a stream's checkpoint from the table's markers: a redo to the table's current
    snapshot (``laketide.redo``; it keeps the old checkpoint beside the new one)."""
    return f"./laketide redo --stream {stream} --snapshot-id {snapshot_id if snapshot_id is not None else 'ID'} --apply"


def check_checkpoint(
    table: str, writer_id: str, checkpoint: Path, state: CheckpointState, marker: Marker | None,
    stream: str | None = None,
) -> None:
    """Refuse to start when the checkpoint and the table disagree (:func:`checkpoint_problems`), naming the
    stream, what is missing and the command that recovers.

    :raises CheckpointMismatchError: they disagree
    """
    problems = checkpoint_problems(state, None if marker is None else marker.batch_id)
    if not problems:
        return
    name = stream or "STREAM"
    if marker is None:
        where = f"table {table} holds no commit of writer {writer_id!r}"
        fix = (f"If the table is right (recreated on purpose), move the checkpoint {checkpoint} aside and start "
               f"again; else restore the table. {REDO_HINT}")
    else:
        current = marker.current_id if marker.current_id is not None else marker.snapshot_id
        where = f"table {table} has batch {marker.batch_id} of writer {writer_id!r} (snapshot {marker.snapshot_id})"
        fix = (f"To recover, rebuild the checkpoint from the table with a redo to its current snapshot {current} "
               f"(the damaged checkpoint is kept beside it): {recovery_command(name, current)} (it runs the "
               "laketide_redo DAG; see docs/operations.md, checkpoint and table disagree).")
    raise CheckpointMismatchError(
        f"refusing to start writer {writer_id!r} of stream {name!r}: checkpoint {checkpoint} does not agree with "
        f"the table: {where}, but {'; '.join(problems)}. Starting would skip or duplicate landing files. {fix}"
    )


def check_replay(stream: str, table: str, batch_id: int, marker: Marker, files: Iterable[str],
                 current_id: int | None) -> None:
    """Before skipping batch ``batch_id`` as already committed (``should_write`` false): refuse when it is not the
    batch the table holds. Only the newest committed batch can be replayed (Spark replays the batch it planned
    last, with the same files); an older id means the checkpoint was renumbered, and files that the commit
    did not record would be marked read and never written.

    :param files: the landing files of the batch (each file with a line; an empty file is in no batch and no
        commit)
    :raises CheckpointMismatchError: the batch is not the committed one
    """
    recorded = set(source_position(marker.summary))
    batch_files = set(files)
    lost = sorted(batch_files - recorded)
    if batch_id == marker.batch_id and batch_files == recorded:
        return
    if batch_id < marker.batch_id:
        what = (f"batch {batch_id} is older than the table's newest batch {marker.batch_id} of the writer (only "
                "the newest can be replayed): the checkpoint was renumbered (offsets/ lost or reset)")
    else:
        what = (f"the table's batch {batch_id} (snapshot {marker.snapshot_id}) recorded other landing files than "
                "this batch holds: the checkpoint was renumbered or damaged")
    shown = ", ".join(lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
    current = current_id if current_id is not None else marker.snapshot_id
    raise CheckpointMismatchError(
        f"stream {stream!r}, batch {batch_id} of table {table}: {what}. Skipping it would mark "
        f"{len(lost)} landing file(s) as read that are not in the table{': ' + shown if lost else ''}. Nothing was "
        f"written; the stream stops. To recover, rebuild the checkpoint from the table with a redo to its current "
        f"snapshot {current}: {recovery_command(stream, current)} (it runs the laketide_redo DAG; see "
        "docs/operations.md, checkpoint and table disagree)."
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
        props[SOURCE_STATS] = json.dumps([_stat_entry(stats[n]) for n in names], separators=(",", ":"))
    for key, value in (extra or {}).items():
        if value is not None:
            props[key] = str(value)
    return props


def _stat_entry(stat: FileStat) -> list[int]:
    return [stat.size, stat.mtime_ms] + ([] if stat.content is None else [stat.content])


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
    return {n: FileStat(*(int(v) for v in s[:3])) for n, s in zip(names, stats, strict=True)}


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


def source_positions(table: Table, snapshot_id: int | None = None) -> dict[str, FileStat | None]:
    """The landing files recorded in the snapshot summaries of ``table``'s lineage ending at ``snapshot_id``
    (default: the current snapshot), with the size and modification time each was read at (when recorded).

    Metadata only (the summaries pyiceberg already parsed). Snapshots removed by expiry are not seen: the
    callers add the source files found in the tables' rows."""
    return ingested_files(lineage_summaries(table, snapshot_id))
