"""Reading one hour (or a few) of an Iceberg table in bounded memory: the close's verification and reconciliation.

* **Row filter by partition**: :func:`hours_row_filter` selects ``start <= column < end`` for each run of hours; on a
  table partitioned by ``hours(column)`` pyiceberg plans the files of those partitions only, so the cost follows
  the hours asked, not the table.
* **Counts from metadata where exact**: :func:`exact_rows` takes a data file's ``record_count`` from its manifest
  entry when the file has no delete files and its partition (``hours`` of the filter's column) is one of the hours:
  every row of such a file is in the hour. Other files (an older unpartitioned spec, deletes) are counted by reading.
* **Record batches, one data file at a time**: :func:`record_batches` streams the projected columns of each planned
  file through pyiceberg's ``ArrowScan`` (deletes and the row filter applied). pyiceberg's own
  ``to_arrow_batch_reader`` materialises every file's batches in a thread pool that runs ahead of its reader, so
  its memory grows with the hour; here the peak is one data file's projected columns (a few hundred MB at most for
  the 512 MB files Iceberg writes by default, far less for the columns verification reads).
* **Uniqueness on disk**: :class:`DuplicateIds` spills the event ids to an on-disk DuckDB database in a temporary
  folder and finds the ids held more than once with a ``GROUP BY`` under a memory limit (DuckDB spills to the
  same folder): memory does not grow with the hour, the disk holds about 20 bytes per row until it is deleted.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laketide.lake.hours import from_epoch_hours, hour_ranges, hour_start, partition_key

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import FileScanTask, Table

#: the rejects of no known partition (``reject_counts``): a malformed line of a file whose audit names several hours
UNATTRIBUTED = "unattributed"
#: DuckDB's default memory limit while it groups the event ids, in bytes (``close.scan_memory``; it spills beyond)
ID_MEMORY_LIMIT = 256 * 1024**2


def hours_row_filter(column: str, hours: Iterable[datetime]) -> BooleanExpression:
    """pyiceberg row filter selecting exactly ``hours`` of ``column`` (consecutive hours merged into one range).

    String literals with an explicit offset: pyiceberg binds them to timestamptz only with one."""
    from pyiceberg.expressions import AlwaysFalse, And, GreaterThanOrEqual, LessThan, Or, Reference
    from pyiceberg.expressions.literals import literal

    term = Reference(column)
    result: BooleanExpression = AlwaysFalse()
    for start, end in hour_ranges(hours):
        one = And(GreaterThanOrEqual(term=term, value=literal(start.isoformat())),
                  LessThan(term=term, value=literal(end.isoformat())))
        result = one if isinstance(result, AlwaysFalse) else Or(result, one)
    return result


def _hour_position(table: Table, column: str, spec_id: int) -> int | None:
    """Position of the ``hours(column)`` field in the partition tuple of spec ``spec_id`` (None: not partitioned
    that way)."""
    from pyiceberg.transforms import HourTransform

    source = table.schema().find_field(column).field_id
    spec = table.specs().get(spec_id)
    for position, part in enumerate(spec.fields if spec is not None else ()):
        if part.source_id == source and isinstance(part.transform, HourTransform):
            return position
    return None


def exact_rows(table: Table, column: str, task: FileScanTask,
               hours: set[datetime] | None) -> tuple[datetime, int] | None:
    """The hour and row count of ``task``'s data file from metadata alone, when exact: no delete files, and the
    file's partition is an hour of ``hours`` (any hour when None; then every row of the file is in it). None:
    count by reading the file."""
    if task.delete_files:
        return None
    position = _hour_position(table, column, task.file.spec_id)
    if position is None:
        return None
    value = task.file.partition[position]
    hour = from_epoch_hours(value) if value is not None else None
    if hour is None or (hours is not None and hour not in hours):
        return None
    return hour, task.file.record_count


def plan(table: Table, row_filter: BooleanExpression, fields: tuple[str, ...],
         snapshot_id: int | None) -> tuple[Any, list[FileScanTask]]:
    """The reader of a scan (one for all its files: building one binds the projection and the row filter) and its
    planned file tasks (metadata only)."""
    from pyiceberg.io.pyarrow import ArrowScan

    scan = table.scan(row_filter=row_filter, selected_fields=fields, snapshot_id=snapshot_id)
    tasks = list(scan.plan_files())
    return ArrowScan(scan.table_metadata, scan.io, scan.projection(), scan.row_filter, scan.case_sensitive), tasks


def record_batches(reader: Any, task: FileScanTask) -> Iterator[pa.RecordBatch]:
    """The record batches of one planned file of a scan (``plan``'s reader: its projection; row filter and deletes
    applied)."""
    yield from reader.to_record_batches([task])


@dataclass(frozen=True)
class Duplicates:
    """Event ids held more than once, from :meth:`DuplicateIds.result`."""

    #: rows holding an id that another row holds too (both counted, as GX's uniqueness counts them)
    rows: int
    #: distinct ids held more than once
    ids: int
    #: rows holding a duplicated id, per part (the ``part`` given to :meth:`DuplicateIds.add`: a data file)
    per_part: dict[int, int]
    #: the most repeated ids (their text), at most ``examples`` of them
    examples: list[str]
    #: every duplicated id and how often it is held, when ``ids`` is at most ``keep`` (else empty)
    counts: dict[str, int]


class DuplicateIds:
    """Event ids spilled to an on-disk DuckDB database; :meth:`result` finds those held more than once.

    Use as a context manager: the database and DuckDB's spill files live in a temporary folder removed on exit."""

    def __init__(self, memory_limit: int = ID_MEMORY_LIMIT, folder: str | None = None) -> None:
        self._memory_limit = memory_limit
        self._parent = folder
        self._created = False
        self._chunks: list[pa.Table] = []
        self._buffered = 0

    def __enter__(self) -> DuplicateIds:
        import duckdb

        self._folder = tempfile.TemporaryDirectory(prefix="laketide-ids-", dir=self._parent)
        path = Path(self._folder.name)
        self._con = duckdb.connect(str(path / "ids.duckdb"))
        for setting in (f"memory_limit = '{self._memory_limit // 1024**2}MiB'", f"temp_directory = '{path / 'spill'}'",
                        "preserve_insertion_order = false", "threads = 2"):
            self._con.execute(f"SET {setting}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._con.close()
        self._folder.cleanup()

    #: ids held in memory before they go to the database together (one insert per small file cost ~10 ms each)
    BUFFER_ROWS = 200_000

    def add(self, ids: pa.Array | pa.ChunkedArray, part: int) -> None:
        """Add one batch of ids, all of one ``part`` (a small integer naming where they were read)."""
        import pyarrow as pa

        self._chunks.append(pa.table({"id": ids, "part": pa.repeat(pa.scalar(part, pa.int32()), len(ids))}))
        self._buffered += len(ids)
        if self._buffered >= self.BUFFER_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._chunks:
            return
        chunk = pa.concat_tables(self._chunks, promote_options="permissive")  # noqa: F841 (DuckDB reads it)
        self._chunks, self._buffered = [], 0
        if self._created:
            self._con.execute("INSERT INTO ids SELECT * FROM chunk")
        else:
            self._con.execute("CREATE TABLE ids AS SELECT * FROM chunk")
            self._created = True

    def result(self, examples: int = 3, keep: int = 10_000) -> Duplicates:
        self._flush()
        if not self._created:
            return Duplicates(0, 0, {}, [], {})
        con = self._con
        con.execute("CREATE TABLE dup AS SELECT id, count(*) AS n FROM ids WHERE id IS NOT NULL GROUP BY id "
                    "HAVING count(*) > 1")
        row = con.execute("SELECT count(*), coalesce(sum(n), 0) FROM dup").fetchone()
        ids, rows = (int(row[0]), int(row[1])) if row is not None else (0, 0)
        if not ids:
            return Duplicates(0, 0, {}, [], {})
        per_part = {int(p): int(n) for p, n in
                    con.execute("SELECT part, count(*) FROM ids SEMI JOIN dup USING (id) GROUP BY part").fetchall()}
        top = [str(r[0]) for r in con.execute("SELECT id FROM dup ORDER BY n DESC, id LIMIT ?", [examples]).fetchall()]
        counts = ({str(i): int(n) for i, n in con.execute("SELECT id, n FROM dup").fetchall()} if ids <= keep else {})
        return Duplicates(rows, ids, per_part, top, counts)


def reject_counts(table: Table, snapshot_id: int | None, audits: dict[str, dict[str, Any]],
                  hours: Collection[datetime] | None = None) -> tuple[Counter[str], set[str]]:
    """Rejected rows per partition of a rejects ``table`` at ``snapshot_id`` (None: nothing), attributed through
    each row's source-file audit record, and the source files of the rejects: of the partitions of ``hours`` only
    (default: every one).

    With ``hours``, only the rejects whose event hour is one of them, or whose source file's audit names one of
    them (a malformed line has no event hour), are read: the rejects table's partitions of those hours, and the
    files whose ``source_file`` bounds admit one of those landing files."""
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThanOrEqual, Or, Reference
    from pyiceberg.expressions.literals import literal

    counts: Counter[str] = Counter()
    files: set[str] = set()
    if snapshot_id is None:
        return counts, files
    keys = {partition_key(hour_start(h)) for h in hours} if hours is not None else None
    row_filter: Any = AlwaysTrue()
    named: set[str] | None = None
    if hours is not None:
        row_filter = hours_row_filter("event_hour", hours)
        named = {name for name, audit in audits.items() if (keys or set()) & set((audit or {}).get("partitions", {}))}
        if named:
            # the range of those names, not an IN list: pyiceberg tests an IN list's every value against every file's
            # bounds and binds it again per file (minutes for thousands of names); the rows are picked below
            term = Reference("source_file")
            row_filter = Or(row_filter, And(GreaterThanOrEqual(term=term, value=literal(min(named))),
                                            LessThanOrEqual(term=term, value=literal(max(named)))))
    reader, tasks = plan(table, row_filter, ("source_file", "event_hour"), snapshot_id)
    for task in tasks:
        for batch in record_batches(reader, task):
            for row in batch.to_pylist():
                if named is not None and row["source_file"] not in named and (
                        row["event_hour"] is None or partition_key(row["event_hour"]) not in (keys or set())):
                    continue  # in the range of the names, of none of them, of another hour
                files.add(row["source_file"])
                parts = list((audits.get(row["source_file"]) or {}).get("partitions", {}))
                hour = partition_key(row["event_hour"]) if row["event_hour"] is not None else None
                if len(parts) == 1:
                    counts[parts[0]] += 1
                elif hour is not None and hour in parts:
                    counts[hour] += 1
                else:
                    counts[UNATTRIBUTED] += 1
    if keys is not None:
        counts = Counter({k: n for k, n in counts.items() if k in keys or k == UNATTRIBUTED})
    return counts, files
