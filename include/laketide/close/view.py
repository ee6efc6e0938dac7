"""One consistent view of a stream for reconciliation and verification: both tables pinned, then the landing zone.

The writer commits a batch to two tables, the rejects first and then the events (``ingest.writer``), while
producers keep landing files; a report that read the landing zone, the events table and the rejects table each at
its own moment would count a file committed in between in one place and not the other, and call a healthy stream
a mismatch. So every report reads through a :class:`View`:

1. the events table's snapshot is pinned first (the current one, or the one asked for);
2. the rejects table's snapshot is pinned to the one that holds exactly the batches that events snapshot holds:
   a commit of the rejects table marked with a writer's batch newer than the writer's newest batch in the events
   snapshot's lineage (its rejects are committed, its events not yet: a batch under way, or a redo that has rolled
   the events table back and not yet the rejects table) is left out, with every commit after it;
3. only then is the landing zone listed (by the caller): a file landed, or committed, after the pinned snapshots is
   not in their source positions, so it is pending, never a mismatch.

Metadata only (the snapshots pyiceberg already parsed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import LaketideError
from laketide.lake.catalog import load_stream_table
from laketide.lake.commits import BATCH_ID, WRITER_ID
from laketide.lake.snapshots import table_lineage

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot


@dataclass(frozen=True)
class View:
    """The stream's two tables, each pinned to one snapshot (None: the table had no snapshot then)."""

    events: Table
    rejects: Table
    events_snapshot: int | None
    rejects_snapshot: int | None


def pin(config: LaketideConfig, stream: StreamConfig, snapshot_id: int | None = None) -> View:
    """Pin the events table at ``snapshot_id`` (default: its current snapshot), then the rejects table at the
    snapshot that holds the same batches (see the module docstring).

    :raises TableNotFoundError: a table does not exist
    :raises LaketideError: ``snapshot_id`` is not a snapshot of the events table
    """
    events = load_stream_table(config, stream.table, stream)
    if snapshot_id is None:
        snapshot_id = events.metadata.current_snapshot_id
    elif events.snapshot_by_id(snapshot_id) is None:
        raise LaketideError(f"snapshot {snapshot_id} is not in {stream.table}: verify at an existing snapshot "
                            "(or none for the current one)")
    rejects = load_stream_table(config, stream.rejects_table, stream)  # after the events table: never older
    return View(events, rejects, snapshot_id, matching_snapshot(events, snapshot_id, rejects))


def _marker(snapshot: Snapshot) -> tuple[str, int] | None:
    summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    writer, batch = summary.get(WRITER_ID), summary.get(BATCH_ID)
    if writer is None or batch is None:
        return None
    try:
        return writer, int(batch)
    except ValueError:
        return None


def newest_batch(view: View, writer_id: str) -> int | None:
    """The newest batch ``writer_id`` committed to the events table in the view (None: none in its lineage)."""
    for snapshot in table_lineage(view.events, view.events_snapshot)[0]:
        if (marker := _marker(snapshot)) is not None and marker[0] == writer_id:
            return marker[1]
    return None


def matching_snapshot(events: Table, events_snapshot: int | None, rejects: Table) -> int | None:
    """The newest snapshot of ``rejects``' current lineage whose newest writer commit (itself, or the nearest below
    it) is no batch newer than the batches of ``events`` at ``events_snapshot``: the commits above that one are of
    batches whose events are not in that snapshot yet, and the snapshots without a marker among them (compaction)
    hold their rows too. None: no such snapshot (the rejects table held nothing of those batches yet).

    A writer absent from the events lineage has committed no batch there (its first batch under way; a redo back to
    before the first batch empties the rejects table in a commit marked batch -1, which is not ahead), unless that
    lineage was cut by expiry: then a rejects commit of that writer is compared by commit time instead."""
    chain, whole = table_lineage(events, events_snapshot)
    newest: dict[str, int] = {}
    for snapshot in chain:
        if (marker := _marker(snapshot)) is not None:
            newest.setdefault(marker[0], marker[1])
    events_ms = chain[0].timestamp_ms if chain else None

    def ahead(snapshot: Snapshot, writer: str, batch: int) -> bool:
        if writer in newest:
            return batch > newest[writer]
        if whole:
            return batch >= 0
        return events_ms is None or snapshot.timestamp_ms > events_ms

    candidate: int | None = None  # the newest snapshot since the last commit found ahead
    for snapshot in table_lineage(rejects, rejects.metadata.current_snapshot_id)[0]:
        if candidate is None:
            candidate = snapshot.snapshot_id
        marker = _marker(snapshot)
        if marker is None:
            continue
        if not ahead(snapshot, *marker):
            return candidate
        candidate = None
    return candidate
