"""What a redo changes, from metadata and the landing zone's listing (pyiceberg, no Spark): the dry-run report,
and the plan the Spark job carries out.

For a redo of stream X back to snapshot S of its events table:

* **position** of S: the newest commit of X's writer in S's lineage (batch ``B_S``) and every landing file the
  writer's commits in that lineage recorded (``laketide.source-files``). When expiry cut the lineage, a file
  older than every file the walked commits took counts as taken (Spark's file source takes the oldest first);
* **events**: the table goes back to S; the snapshots after S in its current lineage are left out;
* **rejects**: the rejects table goes back to its newest snapshot whose writer batch is ``B_S`` or older (or is
  emptied, with a marker of ``B_S``, when it holds no such snapshot);
* **re-ingest**: every landed file not in S's position, from batch ``B_S + 1`` on;
* **hours**: the hours whose data files differ between S and now (discarded, deleted or re-ingested rows).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laketide.config import LaketideConfig, StreamConfig
from laketide.ingest.inspection import archived_landed, landed_files
from laketide.lake.commits import BATCH_ID, WRITER_ID, FileStat, source_position
from laketide.lake.hours import from_epoch_hours, partition_key
from laketide.lake.snapshots import table_lineage
from laketide.redo.params import HourRange, RedoRequest

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: a snapshot of the rejects table that does not exist: the table is emptied (with a marker of B_S)
EMPTY = -1


def _iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _summary(snap: Any) -> dict[str, str]:
    return dict(snap.summary.additional_properties) if snap.summary is not None else {}


def writer_batch(snap: Any, writer_id: str) -> int | None:
    """The writer batch a snapshot commits (None: not a commit of ``writer_id``)."""
    summary = _summary(snap)
    if summary.get(WRITER_ID) == writer_id and BATCH_ID in summary:
        return int(summary[BATCH_ID])
    return None


def position(chain: list[Any], writer_id: str) -> tuple[int | None, dict[str, FileStat | None]]:
    """The newest batch of ``writer_id`` in ``chain`` (newest first) and every landing file its commits recorded."""
    batch: int | None = None
    files: dict[str, FileStat | None] = {}
    for snap in chain:
        found = writer_batch(snap, writer_id)
        if found is None:
            continue
        if batch is None:
            batch = found
        for name, stat in source_position(_summary(snap)).items():
            if files.get(name) is None:
                files[name] = stat
    return batch, files


def rejects_target(table: Table | None, writer_id: str, batch: int | None) -> int | None:
    """The rejects table's snapshot to return to: its newest in the current lineage whose writer batch is ``batch``
    or older (a snapshot after it that is no commit of the writer is left out too). :data:`EMPTY` when no snapshot
    qualifies but the table has some; None when the table has no snapshot (nothing to do)."""
    if table is None or table.metadata.current_snapshot_id is None:
        return None
    chain, _ = table_lineage(table, table.metadata.current_snapshot_id)
    for snap in chain:
        found = writer_batch(snap, writer_id)
        if found is not None and batch is not None and found <= batch:
            return int(snap.snapshot_id)
    return EMPTY


def files_by_hour(table: Table | None, snapshot_id: int | None) -> dict[str, str]:
    """Data and delete files of a table at a snapshot: path -> partition key ('unknown' for the null hour)."""
    if table is None or snapshot_id is None or snapshot_id == EMPTY:
        return {}
    out: dict[str, str] = {}
    for task in table.scan(snapshot_id=snapshot_id).plan_files():
        for f in (task.file, *task.delete_files):
            value = f.partition[0] if len(f.partition) else None
            out[f.file_path] = "unknown" if value is None else partition_key(from_epoch_hours(value))
    return out


def both_files(events: Table | None, events_snapshot: int | None, rejects: Table | None,
               rejects_snapshot: int | None) -> dict[str, str]:
    """``files_by_hour`` of the events and the rejects table together (rejects' paths prefixed ``r:``)."""
    rejected = files_by_hour(rejects, rejects_snapshot)
    return {**files_by_hour(events, events_snapshot), **{f"r:{k}": v for k, v in rejected.items()}}


def changed_hours(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """Hours of the files in one of two ``both_files`` results and not in the other."""
    return {before.get(p) or after[p] for p in set(before) ^ set(after)}


def rows_by_hour(table: Table | None, snapshot_id: int | None) -> dict[str, int]:
    """Rows per hour of a table at a snapshot (the partitions metadata table: manifests only)."""
    if table is None or snapshot_id is None or snapshot_id == EMPTY:
        return {}
    out: dict[str, int] = {}
    for rec in table.inspect.partitions(snapshot_id=snapshot_id).to_pylist():
        value = next(iter(rec["partition"].values()))
        key = "unknown" if value is None else partition_key(from_epoch_hours(value))
        out[key] = out.get(key, 0) + int(rec["record_count"])
    return out


@dataclass
class RedoPlan:
    """What a redo does (all JSON-able: the dry-run report and the task's XCom)."""

    stream: str
    table: str
    rejects_table: str
    snapshot_id: int
    snapshot_time: str
    #: the writer batch of S's position (None: before the writer's first commit)
    batch_id: int | None
    head_id: int | None
    #: snapshots after S in the current lineage, oldest first: id, time, operation, writer batch
    discarded: list[dict[str, Any]]
    rejects_snapshot: int | None
    rejects_head: int | None
    #: landing files of S's position, and those landed since (to re-ingest), oldest first
    position_files: dict[str, list[int] | None]
    reingest: list[str]
    #: the lineage from S reached the first snapshot (else files older than the position's oldest count as taken)
    complete: bool
    #: hours whose files differ between S and now, and rows / rejects per hour now and at S
    hours: list[str]
    rows_now: dict[str, int] = field(default_factory=dict)
    rows_at_snapshot: dict[str, int] = field(default_factory=dict)
    rejects_now: dict[str, int] = field(default_factory=dict)
    rejects_at_snapshot: dict[str, int] = field(default_factory=dict)

    @property
    def position_stats(self) -> dict[str, FileStat | None]:
        return {n: None if s is None else FileStat(*s) for n, s in self.position_files.items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RedoPlan:
        return cls(**data)

    def lines(self, hours: HourRange | None = None) -> list[str]:
        """The report, one line each."""
        head = (f"redo of stream {self.stream}: {self.table} back to snapshot {self.snapshot_id} "
                f"({self.snapshot_time}, writer batch {self.batch_id}) from {self.head_id}")
        ops: dict[str, int] = {}
        for snap in self.discarded:
            kind = "writer batch" if snap["batch_id"] is not None else str(snap["operation"])
            ops[kind] = ops.get(kind, 0) + 1
        out = [head, f"  snapshots left out: {len(self.discarded)} ({', '.join(f'{n} {k}' for k, n in ops.items())})"
               if self.discarded else "  snapshots left out: none (the table is at that snapshot)"]
        if self.rejects_snapshot == EMPTY:
            out.append(f"  {self.rejects_table}: emptied (no commit of batch {self.batch_id} or older)")
        elif self.rejects_snapshot is None:
            out.append(f"  {self.rejects_table}: no snapshot, unchanged")
        else:
            out.append(f"  {self.rejects_table}: back to snapshot {self.rejects_snapshot} (from {self.rejects_head})")
        shown = ", ".join(self.reingest[:5]) + (", ..." if len(self.reingest) > 5 else "")
        out.append(f"  landing files to re-ingest from batch {0 if self.batch_id is None else self.batch_id + 1}: "
                   f"{len(self.reingest)}" + (f" ({shown})" if shown else ""))
        if not self.complete:
            out.append("  note: expiry cut the lineage of the snapshot; files older than its oldest recorded file "
                       "count as ingested")
        scope = hours or HourRange()
        for hour in self.hours:
            mark = "" if hour == "unknown" or datetime.fromisoformat(hour) in scope else " (outside the range)"
            out.append(f"  hour {hour}: rows {self.rows_now.get(hour, 0)} now, {self.rows_at_snapshot.get(hour, 0)} "
                       f"at the snapshot; rejects {self.rejects_now.get(hour, 0)} now, "
                       f"{self.rejects_at_snapshot.get(hour, 0)} at the snapshot{mark}")
        return out

    def json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def load_table(config: LaketideConfig, name: str) -> Table | None:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from laketide.lake.catalog import load_catalog

    try:
        return load_catalog(config.catalog).load_table(name)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def make_plan(config: LaketideConfig, stream: StreamConfig, snapshot_id: int) -> RedoPlan:
    """The plan of a redo of ``stream`` back to ``snapshot_id`` (validated: ``params.validate``)."""
    events = load_table(config, stream.table)
    assert events is not None, f"{stream.table} does not exist"
    rejects = load_table(config, stream.rejects_table)
    head = events.metadata.current_snapshot_id
    current, _ = table_lineage(events, head)
    ids = [s.snapshot_id for s in current]
    after = list(reversed(current[: ids.index(snapshot_id)]))
    chain, complete = table_lineage(events, snapshot_id)
    batch, taken = position(chain, stream.writer_id)
    landed = landed_files(stream.landing_path)
    oldest = min((s.mtime_ms for s in taken.values() if s is not None), default=None)
    reingest = [f.name for f in landed
                if f.name not in taken and (complete or oldest is None or f.mtime_ms >= oldest)]
    for f in landed:  # taken before the lineage's cut (see above): in the position, so never read again
        if f.name not in taken and f.name not in reingest:
            taken[f.name] = FileStat(f.size, f.mtime_ms)
    # the archive (closed hours' files, ``close.archive``): those taken after S are re-ingested (the redo moves them
    # back into data/ first); the others stay archived, out of the writer's sight and of the position
    live = set(reingest) | set(taken)
    reingest += [f.name for f in archived_landed(stream.landing_path)
                 if f.name not in live and (complete or oldest is None or f.mtime_ms >= oldest)]
    target = rejects_target(rejects, stream.writer_id, batch)
    rejects_head = None if rejects is None else rejects.metadata.current_snapshot_id
    changed = changed_hours(both_files(events, head, rejects, rejects_head),
                            both_files(events, snapshot_id, rejects, target))
    snap = events.metadata.snapshot_by_id(snapshot_id)
    assert snap is not None
    return RedoPlan(
        stream=stream.name, table=stream.table, rejects_table=stream.rejects_table, snapshot_id=snapshot_id,
        snapshot_time=_iso_ms(snap.timestamp_ms), batch_id=batch, head_id=head,
        discarded=[{"snapshot_id": s.snapshot_id, "time": _iso_ms(s.timestamp_ms),
                    "operation": str(s.summary.operation.value) if s.summary is not None else None,
                    "batch_id": writer_batch(s, stream.writer_id)} for s in after],
        rejects_snapshot=target,
        rejects_head=rejects_head,
        position_files={n: None if s is None else [s.size, s.mtime_ms] for n, s in taken.items()},
        reingest=reingest, complete=complete, hours=sorted(changed),
        rows_now=rows_by_hour(events, head), rows_at_snapshot=rows_by_hour(events, snapshot_id),
        rejects_now=rows_by_hour(rejects, rejects_head), rejects_at_snapshot=rows_by_hour(rejects, target),
    )


def plan_request(config: LaketideConfig, request: RedoRequest) -> RedoPlan:
    return make_plan(config, config.stream(request.stream), request.snapshot_id)


def hours_to_reclose(config: LaketideConfig, stream: str, run_id: str) -> list[str]:
    """Partition keys of the hours redo ``run_id`` recorded reopened that are decided now (``complete`` or
    ``empty``, as the close's sensor would find them): the redo re-verifies and re-closes these at once. The others
    (the live hour, an hour with a backlog) stay reopened and close on the close DAG's schedule."""
    from laketide.close.partitions import State, check_partitions
    from laketide.close.status import history

    cfg = config.stream(stream)
    hours = sorted({r.partition for r in history(config, stream) if r.state == State.REOPENED and r.run_id == run_id})
    decided = {s.partition for s in check_partitions(config, cfg, hours) if s.state in (State.COMPLETE, State.EMPTY)}
    return [partition_key(h) for h in hours if h in decided]
