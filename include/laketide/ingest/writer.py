"""The exactly-once ``foreachBatch`` sink: one micro-batch -> events table + rejects table, once.

:class:`BatchWriter` stages the batch's data files (one pass), checks them against a second, cheap pass,
and publishes both tables through the fenced commit of ``laketide.ingest.sink`` (see ``laketide.lake.commits``):
the internal commit path, built on the non-public APIs of ``laketide.lake.internals``. With
``commit_path: public`` (or ``auto`` when ``internals.check`` fails, see :func:`choose_commit_path`) it
takes the public commit path instead: the same summary and fence, through ``laketide.ingest.public_sink``.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laketide import logs
from laketide.config import EXTRA_COLUMN, CommitPath, LaketideConfig, StreamConfig
from laketide.errors import ConfigError
from laketide.ingest import batch_figures, dedupe, failures, long_lines, public_sink, sink
from laketide.ingest import faultpoints as faults
from laketide.ingest.public_writer import PublicPath, current_snapshot_id
from laketide.ingest.summary import _from_micros, _iso, _utc, ahead_of_clock, summary_key, warn_ahead, watermark_after
from laketide.lake import commits, file_stats
from laketide.lake.hours import from_epoch_hours

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

from laketide.ingest.inspection import audit_hours
from laketide.ingest.landing import data_dir
from laketide.ingest.long_lines import LongLine
from laketide.ingest.rejects import rejected_rows
from laketide.ingest.transforms import Validator
from laketide.lake.internals import IcebergJvm, SqlitePool, batch_files, write_uncommitted

log = logging.getLogger("laketide.ingest.writer")
#: hashes landing files beside the batch's Spark work (one thread: the work is memory-bound)
_HASHING = ThreadPoolExecutor(1, thread_name_prefix="laketide-hash")


def choose_commit_path(wanted: CommitPath, reason: str | None) -> str:
    """The commit path the writer takes: ``internal`` or ``public``.

    :param wanted: the stream's ``commit_path`` setting
    :param reason: why the internal path cannot run here (``laketide.lake.internals.check``), or None
    :raises ConfigError: ``internal`` is wanted and cannot run
    """
    if wanted == "public":
        log.info("commit path: public (commit_path: public)")
        return "public"
    if reason is None:
        log.info("commit path: internal (Spark and Iceberg are the versions it was written for)")
        return "internal"
    if wanted == "internal":
        raise ConfigError(
            f"commit_path is 'internal' but the internal commit path cannot run here: {reason}. Set "
            "commit_path to 'auto' (or 'public') to use the public commit path, or install the Spark and "
            "Iceberg versions in requirements.txt."
        )
    log.warning("commit path: public, not internal: %s (commit_path: auto)", reason)
    return "public"


@dataclass
class Staged:
    """The data files written by a batch's pre-commit, not yet in any snapshot, and what they hold."""

    table: Any  # the Java Iceberg table, loaded after the write (py4j)
    data_files: list[Any]  # Java DataFile objects (py4j) of the valid rows, to publish
    rows: dict[str, int]  # valid rows per partition key
    rejected: int  # rows of the null hour partition with a source file: the rejected lines (never published)
    min_event_time: int | None  # epoch microseconds, from the files' column bounds
    max_event_time: int | None
    #: rows of the null hour partition with a null ``_batch_id``: duplicates dropped (``dedupe_on_write``)
    dropped: int = 0
    #: (location, newest event time in epoch microseconds) of each data file of valid rows
    highs: list[tuple[str, int]] = field(default_factory=list)
    #: the data files of the null hour partition (rejected and blank lines, duplicates dropped): read by the rejects
    #: pass, then deleted (never committed)
    null_files: list[str] = field(default_factory=list)
    #: the Spark schema of the rows written (the null hour partition's files are read back with it: no footer is read
    #: to infer it)
    schema: Any = None

    @property
    def valid(self) -> int:
        return sum(self.rows.values())



class BatchWriter(PublicPath):
    """``foreachBatch`` sink: a two-phase commit of each micro-batch, once.

    1. pre-commit: every line is written in ONE pass over the batch as data files of the events table that
       no snapshot references yet (the Spark write hands them back instead of committing them), the
       rejected ones (and blank lines) with a null event time (``Validator.staged_rows``). The valid rows per
       partition, the number of rejects (the null partition's rows that have a source file) and the
       event-time range are read from the files' metadata (record counts, null counts, column bounds); the
       batch's landing files from its plan (``batch_files``);
    2. the rejects, if any, are written the same way to the rejects table and published (a second pass,
       only for batches with rejects);
    3. commit: one atomic catalog swap appends the data files of the valid rows to the events table with
       the full summary (writer id, batch id, source files, rows per partition, event-time range,
       watermark). The files of the null partition are deleted, never committed.

    Both publishes are fenced (``laketide.ingest.sink.publish``): they commit only on top of the writer's commit
    the batch started from, so a replaced writer that wakes up cannot commit a batch twice. A replayed batch
    already committed is skipped (``commits.should_write``, read from the Java table the commit goes to);
    the files of a batch killed before its commit are in no snapshot: orphans for the cleaner. A busy or
    unreachable catalog is waited out (``sink.retrying``, up to ``catalog.retry_timeout``).
    """

    def __init__(self, config: LaketideConfig, stream: StreamConfig, commit_path: str = "internal",
                 summary: dict[str, str] | None = None) -> None:
        self.config = config
        self.stream = stream
        #: more snapshot summary properties for every commit (a redo names itself: ``laketide.redo-id``)
        self.summary = dict(summary or {})
        self.prefix = config.catalog.name
        self.validator = Validator(stream)
        self.timeout = config.catalog.retry_timeout
        if commit_path == "public" and stream.dedupe_on_write:
            raise ConfigError(
                f"stream {stream.name!r}: dedupe_on_write is implemented on the internal commit path only, and this "
                "writer would commit through the public one (commit_path, or a failed start-up check of the internal "
                "path). Set dedupe_on_write: false, or run the Spark and Iceberg versions of requirements.txt."
            )
        self.commit_path = commit_path
        self.validator.plan_keys = commit_path == "internal"
        self._iceberg: IcebergJvm | None = None
        self._public: public_sink.PublicIceberg | None = None
        self._sqlite: SqlitePool | None = None

    def iceberg(self, spark: SparkSession) -> IcebergJvm:
        self._iceberg = self._iceberg or IcebergJvm(spark, self.prefix)
        return self._iceberg

    def _write_uncommitted(self, df: DataFrame, table: str, file_set: str) -> tuple[Any, Any]:
        """Write ``df`` as data files of ``table`` that no snapshot references; return the Java table and
        the written files."""
        return write_uncommitted(df, f"{self.prefix}.{table}", self.iceberg(df.sparkSession), file_set)

    def _stage(self, df: DataFrame, file_set: str) -> Staged:
        """Write ``df`` as data files of the events table without committing them; return what they hold."""
        jtable, written = self._write_uncommitted(df, self.stream.table, file_set)
        staged = self._read_staged(self.iceberg(df.sparkSession), jtable, written)
        staged.schema = df.schema
        return staged

    def _read_staged(self, iceberg: IcebergJvm, table: Any, written: Any) -> Staged:
        schema = table.schema()
        time_field = schema.findField(self.stream.event_time_field)
        field_id, field_type = time_field.fieldId(), time_field.type()
        source_id = schema.findField("_source_file").fieldId()
        batch_field = schema.findField("_batch_id").fieldId() if self.stream.dedupe_on_write else None
        conversions, integer = iceberg.conversions, iceberg.integer
        staged = Staged(table, [], {}, 0, None, None)
        it = written.iterator()
        while it.hasNext():
            data_file = it.next()
            count = int(data_file.recordCount())
            hour = data_file.partition().get(0, integer)  # hours since the epoch (hours transform)
            if hour is None:  # rejected and blank lines (see Validator.staged_rows): counted, then deleted
                nulls = data_file.nullValueCounts()
                blank = None if nulls is None else nulls.get(source_id)
                if blank is None:
                    raise RuntimeError(
                        f"data file {data_file.location()} of {self.stream.table} has no null count for "
                        "'_source_file': keep column metrics for it (table property "
                        "write.metadata.metrics.column._source_file=counts)"
                    )
                dropped = 0
                if batch_field is not None:  # duplicates dropped by dedupe_on_write (laketide.ingest.dedupe)
                    dropped = int(nulls.get(batch_field) or 0)
                    staged.dropped += dropped
                staged.rejected += count - int(blank) - dropped
                staged.null_files.append(str(data_file.location()))
                continue
            staged.data_files.append(data_file)
            key = summary_key(from_epoch_hours(hour))
            staged.rows[key] = staged.rows.get(key, 0) + count
            if count == 0:
                continue
            lower, upper = data_file.lowerBounds(), data_file.upperBounds()
            low = None if lower is None else lower.get(field_id)
            high = None if upper is None else upper.get(field_id)
            if low is None or high is None:
                raise RuntimeError(
                    f"data file {data_file.location()} of {self.stream.table} has no bounds for "
                    f"{self.stream.event_time_field!r}: keep column metrics for it (table property "
                    f"write.metadata.metrics.column.{self.stream.event_time_field}=full)"
                )
            lo, hi = int(conversions.fromByteBuffer(field_type, low)), int(conversions.fromByteBuffer(field_type, high))
            staged.min_event_time = lo if staged.min_event_time is None else min(staged.min_event_time, lo)
            staged.max_event_time = hi if staged.max_event_time is None else max(staged.max_event_time, hi)
            staged.highs.append((str(data_file.location()), hi))
        return staged

    def _ahead_of_clock(self, spark: SparkSession, staged: Staged, now: datetime) -> dict[str, str]:
        """The producers of the batch whose events run more than ``max_clock_skew`` ahead of ``now``, with their
        latest event time. Reads only the staged data files whose column bounds hold such events (none, for a
        batch whose newest event time is within the skew: the caller asks only then)."""
        from pyspark.sql import functions as F

        stream = self.stream
        limit = now + stream.max_clock_skew
        paths = [path for path, high in staged.highs if (_from_micros(high) or limit) > limit]
        if not paths:
            return {}
        time_col = F.col(f"`{stream.event_time_field}`")
        rows = (spark.read.parquet(*paths).where(time_col > F.lit(limit))
                .groupBy("_source_file").agg(F.max(time_col).alias("latest")).collect())
        return ahead_of_clock({str(r["_source_file"]): r["latest"] for r in rows}, now, stream.max_clock_skew)

    def _publish(self, table: Any, data_files: list[Any], props: dict[str, str], batch_id: int,
                 expected: commits.Marker | None) -> int:
        """Append ``data_files`` to the Java ``table`` in one fenced commit carrying ``props``; return the new
        snapshot id (see ``sink.publish``)."""
        assert self._iceberg is not None
        return sink.publish(self._iceberg.metadata, table, data_files, props, self.stream.writer_id, batch_id,
                            expected, self.timeout, self._iceberg.sqlite.reopen)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Commit micro-batch ``batch_id`` once; a busy or unreachable catalog is waited out. Its log lines name the
        stream."""
        with logs.for_stream(self.stream.name):
            self._once(batch, batch_id)

    def _once(self, batch: DataFrame, batch_id: int) -> None:
        stream = self.stream
        failures.begin(stream, batch_id, batch)  # before its work: if the JVM dies in it, the next start names it

        def write() -> None:
            if self.commit_path == "public":
                self._write_public(batch, batch_id)
            else:
                self._write(batch, batch_id)

        try:
            sink.retrying(f"batch {batch_id} of {stream.name}", write, self.timeout)
        except Exception as exc:
            if failures.cut_by_stop(exc):  # not the batch's failure: replayed at the next start, nothing recorded
                log.info("batch %d of stream %s cut short by the stop (%s): it is replayed at the next start",
                         batch_id, stream.name, sink.root_cause(exc))
            else:
                failures.record(stream, batch_id, batch, exc, plan=self.commit_path == "internal")
            raise
        failures.clear(stream, batch_id)

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        faults.maybe_pause("batch_start", batch_id, self.stream.name)
        started = time.monotonic()
        stream = self.stream
        iceberg = self.iceberg(batch.sparkSession)
        events_table = iceberg.table(f"{self.prefix}.{stream.table}")
        events_marker = sink.table_marker(events_table, stream.writer_id)
        if not commits.should_write(batch_id, events_marker):
            assert events_marker is not None
            # a replay of the batch the table holds, with its files: anything else is a renumbered checkpoint
            commits.check_replay(stream.name, stream.table, batch_id, events_marker, batch_files(batch),
                                 current_snapshot_id(events_table))
            log.info("batch %d already committed to %s by %s: skipped", batch_id, stream.table, stream.writer_id)
            return
        self.validator.with_extra = events_table.schema().findField(EXTRA_COLUMN) is not None
        now = datetime.now(UTC).replace(microsecond=0)
        files = batch_files(batch)
        # each file's content hash, read beside Spark's pass (from the page cache it just filled)
        hashing = _HASHING.submit(file_stats.with_content, files.stats, data_dir(stream.landing_path))
        # the lines above max_line_bytes, looked for beside Spark's pass too (nothing is read unless a file is larger
        # than max_line_bytes); the batch's rows above the limit are left out whether there are such lines or not: a
        # batch without one has no such row, and the filter is one comparison per line
        finding = _HASHING.submit(long_lines.find, stream, files.stats)
        file_set = f"laketide-{stream.writer_id}-{batch_id}-{uuid.uuid4().hex[:12]}"
        planned = time.monotonic()
        rows = self.validator.staged_rows(long_lines.without_long(batch, stream), batch_id, files=files)
        dropped: dict[str, int] = {}
        marked = None
        if stream.dedupe_on_write:
            marked, dropped = self._mark_duplicates(rows, events_table)
            rows = marked.drop(dedupe.HOUR_KEY)
        try:
            staged = self._stage(rows, file_set)
        finally:
            if marked is not None:
                marked.unpersist()
            files.stats = hashing.result()
        try:
            long = finding.result()
            self._commit(batch, batch_id, staged, dropped, events_marker, files, now, (started, planned), long)
        finally:
            for location in staged.null_files:
                staged.table.io().deleteFile(location)

    def _commit(self, batch: DataFrame, batch_id: int, staged: Staged, dropped: dict[str, int],
                events_marker: commits.Marker | None, files: commits.SourceFiles, now: datetime,
                times: tuple[float, float], long: list[LongLine] | None = None) -> None:
        """The rejects pass (when the batch has rejects), then the fenced commit of the staged valid rows.
        ``long``: the lines above ``max_line_bytes`` the reader skipped (``long_lines.find``), rejected as well."""
        stream = self.stream
        started, planned = times
        iceberg = self.iceberg(batch.sparkSession)
        if staged.dropped != sum(dropped.values()):
            raise RuntimeError(f"batch {batch_id}: {staged.dropped} duplicate rows staged, {sum(dropped.values())} "
                               "counted: the passes over the batch disagree; nothing was committed")
        staged_at = time.monotonic()
        long = long or []
        valid, rejected = staged.valid, staged.rejected + len(long)
        faults.maybe_pause("before_commit", batch_id, self.stream.name)

        newest = _from_micros(staged.max_event_time)
        ahead = {}
        if newest is not None and newest > now + stream.max_clock_skew:
            ahead = self._ahead_of_clock(batch.sparkSession, staged, now)
        watermark = watermark_after(events_marker.watermark if events_marker else None, newest, now,
                                    stream.max_clock_skew)
        extra: dict[str, Any] = {
            commits.VALID_ROWS: valid,
            commits.REJECTED_ROWS: rejected,
            commits.MIN_EVENT_TIME: _iso(_from_micros(staged.min_event_time)),
            commits.MAX_EVENT_TIME: _iso(newest),
            commits.WATERMARK: watermark,
            commits.AHEAD_OF_CLOCK: warn_ahead(stream, batch_id, ahead),
            **self.summary,
        }
        if rejected:  # the rejects table is read only for batches that have rejects (its publish is fenced)
            rejects_table = iceberg.table(f"{self.prefix}.{stream.rejects_table}")
            rejects_marker = sink.table_marker(rejects_table, stream.writer_id)
            if commits.should_write(batch_id, rejects_marker):
                self._reject(batch, batch_id, now, files, staged, extra, rejects_marker, long)
        faults.maybe_pause("between_tables", batch_id, self.stream.name)
        published = time.monotonic()
        if dropped:
            extra[commits.DUPLICATES_DROPPED] = json.dumps(dict(sorted(dropped.items())), separators=(",", ":"))
        props = commits.summary_properties(stream.writer_id, batch_id, files, staged.rows, extra)
        snapshot_id = self._publish(staged.table, staged.data_files, props, batch_id, events_marker)
        faults.maybe_pause("after_commit", batch_id, self.stream.name)
        done = time.monotonic()
        log.info(
            "batch %d committed as snapshot %d: %d valid, %d rejected, %d files, watermark %s "
            "(plan %.2fs, pre-commit %.2fs, rejects %.2fs, commit %.2fs; %.2fs)%s",
            batch_id, snapshot_id, valid, rejected, len(files), watermark, planned - started, staged_at - planned,
            published - staged_at, done - published, done - started,
            f"; {staged.dropped} duplicate(s) dropped" if stream.dedupe_on_write else "",
        )
        batch_figures.record(stream.name, valid, rejected, done - started, watermark)

    def _mark_duplicates(self, rows: DataFrame, events_table: Any) -> tuple[DataFrame, dict[str, int]]:
        """``dedupe.mark`` of the staged rows against the events table's ids of the batch's hours, at the snapshot
        the batch builds on; the marked rows are kept in memory (the caller unpersists them) for the write and the
        count of duplicates per hour."""
        from pyspark.sql import functions as F

        from laketide.lake.hours import hours_filter

        stream = self.stream
        spark = rows.sparkSession
        existing = None
        snapshot = events_table.currentSnapshot()
        hours = [_utc(h) for h in dedupe.batch_hours(rows, stream)]
        if snapshot is not None and hours:
            existing = (spark.read.option("snapshot-id", str(snapshot.snapshotId()))
                        .table(f"{self.prefix}.{stream.table}")
                        .where(F.expr(hours_filter(stream.event_time_field, hours))))
        marked = dedupe.mark(rows, stream, existing).persist()
        return marked, dedupe.dropped_per_hour(marked)

    def _reject(self, batch: DataFrame, batch_id: int, now: datetime, files: list[str], staged: Staged,
                extra: dict[str, Any], marker: commits.Marker | None, long: list[LongLine]) -> None:
        """Commit the batch's rejected lines to the rejects table, fenced like the events. The lines are read from
        the staged files of the null hour partition (``Validator.rejects_of``), not from the batch: the pass costs
        in proportion to the rejects. The rows per hour come from the written files' metadata: no row reaches the
        driver. ``long``: the lines above ``max_line_bytes`` the reader skipped, rejected from what the driver's
        scan kept of them (``long_lines.rejects``)."""
        stream = self.stream
        spark = batch.sparkSession
        expected = staged.rejected + len(long)
        parts = []
        if staged.rejected:
            parts.append(self.validator.rejects_of(spark.read.schema(staged.schema).parquet(*staged.null_files)))
        if long:
            parts.append(long_lines.rejects(spark, stream, long))
        lines = functools.reduce(lambda a, b: a.unionByName(b), parts)
        rejects = rejected_rows(lines, stream, batch_id, now, audit_hours(stream.landing_path, files))
        file_set = f"laketide-{stream.writer_id}-{batch_id}-rejects-{uuid.uuid4().hex[:12]}"
        jtable, written = self._write_uncommitted(rejects, stream.rejects_table, file_set)
        integer = self.iceberg(batch.sparkSession).integer
        data_files: list[Any] = []
        by_hour: dict[str, int] = {}
        it = written.iterator()
        while it.hasNext():
            data_file = it.next()
            hour = data_file.partition().get(0, integer)
            key = summary_key(None if hour is None else from_epoch_hours(hour))
            by_hour[key] = by_hour.get(key, 0) + int(data_file.recordCount())
            data_files.append(data_file)
        if sum(by_hour.values()) != expected:
            raise RuntimeError(
                f"batch {batch_id}: {sum(by_hour.values())} rejected lines found, {expected} expected "
                "(rows staged in the null hour partition): the staged files and the rejects read from them "
                "disagree; nothing was committed"
            )
        props = commits.summary_properties(stream.writer_id, batch_id, files, by_hour, extra)
        self._publish(jtable, data_files, props, batch_id, marker)
