"""The partition status record: one Iceberg table (``close.status_table``) written with pyiceberg, no Spark.

The one source the UI and users read: per stream and partition (UTC hour), its state, counts, verification
result and the events-table snapshot the state was decided at. The table is append-only history: every
state change is a row; "the latest state of a partition" is the newest row (by ``recorded_at``) on read.

Columns: ``stream``, ``partition`` (timestamptz, the hour start), ``state`` (a :class:`State` value),
``rows``, ``rejects``, ``audit``, ``verification`` (JSON), ``snapshot_id``, ``reason``, ``run_id``,
``recorded_at`` (timestamptz). Partitioned by ``stream`` (identity); pyiceberg merges manifests on append
(``commit.manifest-merge.enabled``) so reads stay cheap.

Run ``./laketide status [--stream NAME] [--all]`` (or ``python -m laketide.close.status``) for the latest state of
every partition, and, checked now (not recorded), the hours being written and every other hour with rows and no
recorded state (a replay's, however old), with each table's health (``--all``: every recorded row, oldest first).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from laketide.close.partitions import PartitionStatus, State
from laketide.config import LaketideConfig, StreamConfig, get_config
from laketide.errors import LaketideError, StatusRecordError
from laketide.lake.catalog import append_rows, load_catalog, table_or_create
from laketide.lake.hours import HOUR, hour_start

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

log = logging.getLogger("laketide.close.status")

TABLE_PROPERTIES = {
    "format-version": "2",
    # pyiceberg's fast append adds one manifest per commit; merging keeps status reads cheap
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    # pyiceberg (>= 0.10) retries a conflicting commit itself: refresh, re-apply the append, commit again
    "commit.retry.num-retries": "10",
    "commit.retry.min-wait-ms": "50",
    "commit.retry.max-wait-ms": "2000",
}
_COUNTS = ("rows", "rejects", "audit")


def _aware_utc(name: str, value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise StatusRecordError(f"{name} must be a datetime, got {type(value).__name__} {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise StatusRecordError(
            f"{name} {value.isoformat()} is naive: pass a timezone-aware datetime (e.g. tzinfo=datetime.UTC)"
        )
    return value.astimezone(UTC)


def _state(value: Any) -> State:
    try:
        return State(value)
    except ValueError:
        raise StatusRecordError(
            f"unknown partition state {value!r}: use one of {[s.value for s in State]}"
        ) from None


@dataclass(frozen=True)
class StatusRecord:
    """One row of the status table: a partition's state, as decided at ``recorded_at``.

    Validated on construction: ``partition`` must be an aware UTC hour start (normalised to UTC),
    ``state`` a :class:`State` (or its value), counts non-negative, ``verification`` JSON.
    """

    stream: str
    partition: datetime
    state: State
    rows: int | None = None
    rejects: int | None = None
    audit: int | None = None
    verification: str | None = None
    snapshot_id: int | None = None
    reason: str | None = None
    run_id: str | None = None
    recorded_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        if not isinstance(self.stream, str) or not self.stream:
            raise StatusRecordError(f"stream must be a non-empty string, got {self.stream!r}")
        partition = _aware_utc("partition", self.partition)
        try:
            partition = hour_start(partition)
        except ValueError:  # aware, so only the minutes can be wrong
            raise StatusRecordError(
                f"partition {partition.isoformat()} is not an hour start (minute=second=0)"
            ) from None
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "state", _state(self.state))
        object.__setattr__(self, "recorded_at", _aware_utc("recorded_at", self.recorded_at))
        for name in _COUNTS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise StatusRecordError(f"{name} must be a non-negative integer or None, got {value!r}")
        snapshot_id = self.snapshot_id
        if snapshot_id is not None and (not isinstance(snapshot_id, int) or isinstance(snapshot_id, bool)):
            raise StatusRecordError(f"snapshot_id must be an integer or None, got {self.snapshot_id!r}")
        if self.verification is not None:
            try:
                json.loads(self.verification)
            except (TypeError, ValueError):
                raise StatusRecordError(
                    f"verification must be a JSON string (Verification.summary_json()), got {self.verification!r:.200}"
                ) from None
        for name in ("reason", "run_id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise StatusRecordError(f"{name} must be a string or None, got {value!r}")


def table_schema() -> Schema:
    """The status table's Iceberg schema."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    return Schema(
        NestedField(1, "stream", StringType(), required=True),
        NestedField(2, "partition", TimestamptzType(), required=True, doc="UTC hour start of the partition"),
        NestedField(3, "state", StringType(), required=True, doc="laketide.close.partitions.State value"),
        NestedField(4, "rows", LongType(), required=False, doc="lake rows of the partition"),
        NestedField(5, "rejects", LongType(), required=False, doc="rejected lines attributed to the partition"),
        NestedField(6, "audit", LongType(), required=False, doc="records the producers reported"),
        NestedField(7, "verification", StringType(), required=False, doc="JSON summary of the GX validation"),
        NestedField(8, "snapshot_id", LongType(), required=False, doc="events-table snapshot of the decision"),
        NestedField(9, "reason", StringType(), required=False),
        NestedField(10, "run_id", StringType(), required=False, doc="Airflow run id"),
        NestedField(11, "recorded_at", TimestamptzType(), required=True),
    )


def status_table(config: LaketideConfig) -> Table:
    """The status table; its namespace and the table are created when missing.

    :param config: the laketide configuration (``close.status_table`` names the table)
    """
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="stream"))
    return table_or_create(load_catalog(config.catalog), config.close.status_table, table_schema(), spec,
                           TABLE_PROPERTIES)


def _arrow(table: Table, records: tuple[StatusRecord, ...]) -> pa.Table:
    import pyarrow as pa

    columns = [f.name for f in fields(StatusRecord)]
    rows = [{name: getattr(r, name) for name in columns} for r in records]
    for row in rows:
        row["state"] = row["state"].value
    return pa.Table.from_pylist(rows, schema=table.schema().as_arrow())


def _retryable(exc: BaseException) -> bool:
    """A conflicting commit, a locked SQLite catalog or a catalog server that cannot be reached: try again."""
    from pyiceberg.exceptions import CommitFailedException
    from sqlalchemy.exc import DBAPIError, OperationalError

    if isinstance(exc, (CommitFailedException, OperationalError)):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def record(config: LaketideConfig, *records: StatusRecord) -> None:
    """Append ``records`` to the status table in one commit.

    Concurrent writers (two DAG tasks, the stream's writer on the same catalog) may conflict: pyiceberg
    retries the commit on the refreshed table (``commit.retry.*`` table properties); if it still fails with
    ``CommitFailedException``, or the catalog is locked or unreachable, the table is reloaded and the append
    retried with a jittered back-off until ``catalog.retry_timeout`` (one log line per attempt).

    :raises StatusRecordError: a record names a stream that is not configured
    :raises CatalogUnavailableError: the catalog stayed busy or unreachable for ``catalog.retry_timeout``
    """
    from laketide.ingest.sink import retrying

    if not records:
        return
    for r in records:
        if not isinstance(r, StatusRecord):
            raise StatusRecordError(f"record() takes StatusRecord objects, got {type(r).__name__}")
        config.stream(r.stream)  # ConfigError naming the configured streams

    def append() -> None:
        table = status_table(config)
        append_rows(table, _arrow(table, records))

    retrying(f"status record of {config.close.status_table}", append, config.catalog.retry_timeout, _retryable)


def _from_row(row: dict[str, Any]) -> StatusRecord:
    names = {f.name for f in fields(StatusRecord)}
    return StatusRecord(**{k: v for k, v in row.items() if k in names})


def history(config: LaketideConfig, stream: str, partition: datetime | None = None) -> list[StatusRecord]:
    """Every recorded row of ``stream`` (of one ``partition`` when given), oldest first.

    A status table that does not exist yet holds nothing: ``[]``.
    """
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.expressions import And, BooleanExpression, EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    # keyword arguments: what mypy sees of pyiceberg's pydantic predicates
    row_filter: BooleanExpression = EqualTo(term=Reference("stream"), value=literal(stream))
    if partition is not None:
        hour = _aware_utc("partition", partition)
        # a string literal becomes timestamptz when bound; pyiceberg needs the explicit offset (+00:00)
        row_filter = And(row_filter, EqualTo(term=Reference("partition"), value=literal(hour.isoformat())))
    try:
        table = load_catalog(config.catalog).load_table(config.close.status_table)
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    rows = table.scan(row_filter=row_filter).to_arrow().to_pylist()
    records = [_from_row(row) for row in rows]
    return sorted(records, key=lambda r: r.recorded_at)  # stable: rows of one commit keep their order


def latest(config: LaketideConfig, stream: str) -> dict[datetime, StatusRecord]:
    """The newest record of every partition of ``stream``, by partition (oldest partition first)."""
    newest: dict[datetime, StatusRecord] = {}
    for r in history(config, stream):
        newest[r.partition] = r
    return dict(sorted(newest.items()))


#: how far back :func:`being_written` looks for recent hours no status was recorded for yet
LOOKBACK = timedelta(hours=6)


def being_written(config: LaketideConfig, stream: StreamConfig, recorded: Iterable[datetime],
                  now: datetime | None = None) -> list[PartitionStatus]:
    """The hours no status is recorded for, checked now from metadata and not recorded, oldest first: the hours
    after the newest recorded one up to the current hour (at most ``LOOKBACK``: the hour being written with its
    rows so far and its state, open, lagging, ...), and every other hour the events table holds rows of (its
    partitions metadata: manifests, no data file), however old, such as the hours of a replay written after the
    last close. None before the writer has created the stream's table."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from laketide.close.partitions import check_partitions, partition_rows

    try:
        load_catalog(config.catalog).load_table(stream.table)
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    now = now or datetime.now(UTC)
    current = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    seen = set(recorded)
    newest = max(seen, default=None)
    first = max(current - LOOKBACK, newest + HOUR) if newest is not None else current - LOOKBACK
    hours = {first + i * HOUR for i in range(int((current - first) / HOUR) + 1)} if first <= current else set()
    hours |= {hour for hour, rows in partition_rows(config, stream).items() if rows and hour not in seen}
    return check_partitions(config, stream, sorted(hours), now)


def format_live(statuses: list[PartitionStatus]) -> list[str]:
    return [f"  {_fmt(s.partition):<25} {s.state.value:<9} {s.rows:>8} {'':>8} {'':>8} {_fmt(s.snapshot_id):>20} "
            f"{'(checked now)':<25} {s.reason}" for s in statuses]


def _writers(config: LaketideConfig) -> dict[str, str]:
    """One line per stream on its writer, as its application last reported it (``lake.writer_status``)."""
    import time

    from laketide.lake.lease import engine_for
    from laketide.lake.writer_status import read

    engine = engine_for(config.catalog)
    try:
        statuses = read(engine)
    except Exception:  # the catalog database cannot be read: the hours still can be
        return {}
    finally:
        engine.dispose()
    out = {}
    for name, st in statuses.items():
        figures = st.figures
        fresh = (f"; landed -> committed p95 {figures['p95']:.0f}s, lag {figures.get('lag') or 0:.0f}s, backlog "
                 f"{figures.get('backlog')} file(s)" if figures.get("p95") is not None else "")
        out[name] = (f"{st.state} in group {st.group} ({figures.get('application', st.host)}), reported "
                     f"{int(time.time() - st.updated_at)}s ago{fresh}" + (f": {st.reason}" if st.reason else ""))
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return str(value)


def format_table(records: list[StatusRecord]) -> list[str]:
    """Lines of a fixed-width table of ``records``."""
    lines = [
        f"  {'partition':<25} {'state':<9} {'rows':>8} {'rejects':>8} {'audit':>8} {'snapshot':>20} "
        f"{'recorded_at':<25} reason"
    ]
    for r in records:
        lines.append(
            f"  {_fmt(r.partition):<25} {r.state.value:<9} {_fmt(r.rows):>8} {_fmt(r.rejects):>8} "
            f"{_fmt(r.audit):>8} {_fmt(r.snapshot_id):>20} {_fmt(r.recorded_at):<25} {r.reason or ''}".rstrip()
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", metavar="NAME", help="stream name (default: every configured stream)")
    parser.add_argument("--all", action="store_true", help="every recorded row (history), not only the latest")
    args = parser.parse_args(argv)
    try:
        config = get_config()
        streams = [config.stream(args.stream)] if args.stream else config.streams
        writers = _writers(config)
        for stream in streams:
            what = "every recorded state" if args.all else "latest state per partition"
            print(f"stream {stream.name}: {config.close.status_table} ({what})")
            if stream.name in writers:
                print(f"  writer: {writers[stream.name]}")
            records = history(config, stream.name) if args.all else list(latest(config, stream.name).values())
            if records:
                print("\n".join(format_table(records)))
            else:
                print("  no status recorded yet")
            if not args.all:
                live = being_written(config, stream, [r.partition for r in records])
                if live:
                    if not records:
                        print("\n".join(format_table([])))
                    print("\n".join(format_live(live)))
    except LaketideError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
