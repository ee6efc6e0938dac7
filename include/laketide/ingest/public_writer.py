"""The public commit path of :class:`laketide.ingest.writer.BatchWriter`: public Spark and Iceberg APIs only.

One pass over the batch's lines into a cache whose aggregate gives the summary, then each table's rows are
written to a staging branch and published by a fast-forward of ``main`` (``laketide.ingest.public_sink``).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laketide.config import EXTRA_COLUMN, LaketideConfig, StreamConfig
from laketide.ingest import batch_figures, long_lines, public_sink
from laketide.ingest import faultpoints as faults
from laketide.ingest.columns import LANDED_AT, SOURCE_SIZE
from laketide.ingest.inspection import audit_hours
from laketide.ingest.long_lines import LongLine
from laketide.ingest.rejects import rejected_rows
from laketide.ingest.summary import (
    MICROS_PER_HOUR,
    _from_micros,
    _iso,
    ahead_of_clock,
    summary_key,
    warn_ahead,
    watermark_after,
)
from laketide.ingest.transforms import Validator
from laketide.lake import commits
from laketide.lake.hours import from_epoch_hours
from laketide.lake.internals import SqlitePool, batch_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("laketide.ingest.writer")


def current_snapshot_id(table: Any) -> int | None:
    """The current snapshot id of the Java Iceberg ``table`` (as last refreshed), None when it has none."""
    head = table.currentSnapshot()
    return None if head is None else int(head.snapshotId())


def plan_files(batch: DataFrame) -> commits.SourceFiles | None:
    """The batch's landing files from its plan (``internals.batch_files``: a non-public API) when this Spark's plans
    can be read, else None. The public path relies on no Spark plan, and uses one when there is: a file of which
    the reader gives the batch no row (every line of it above ``max_line_bytes``, see ``long_lines``) is named
    only there."""
    try:
        return batch_files(batch)
    except Exception:
        return None


class PublicPath:
    """The public path's batch, rejects and publish; :class:`laketide.ingest.writer.BatchWriter` takes it when
    its commit path is ``public``."""

    config: LaketideConfig
    stream: StreamConfig
    prefix: str
    validator: Validator
    timeout: Any
    summary: dict[str, str]
    _public: public_sink.PublicIceberg | None
    _sqlite: SqlitePool | None


    def _publish_public(self, spark: SparkSession, table: str, rows: DataFrame, props: dict[str, str],
                        batch_id: int, expected: commits.Marker | None, point: str | None) -> int:
        """Publish ``rows`` to ``table`` through a staging branch (see ``public_sink.publish``)."""
        self._public = self._public or public_sink.PublicIceberg(spark)
        self._sqlite = self._sqlite or SqlitePool(spark, self.prefix)
        return public_sink.publish(
            self._public, f"{self.prefix}.{table}", rows, props, self.stream.writer_id, batch_id, expected,
            self.timeout, self._sqlite.reopen,
            staged=(lambda: faults.maybe_pause(point, batch_id, self.stream.name)) if point else (lambda: None),
        )

    def _write_public(self, batch: DataFrame, batch_id: int) -> None:
        """The public path's batch: one pass over the lines into a cache, whose aggregate gives the summary
        (rows per partition, rejects, event-time range, landing files with size and modification time), then
        the valid rows from the cache to the events table; rejects as in the internal path."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        faults.maybe_pause("batch_start", batch_id, self.stream.name)
        started = time.monotonic()
        stream = self.stream
        spark = batch.sparkSession
        self._public = self._public or public_sink.PublicIceberg(spark)
        events_table = self._public.table(f"{self.prefix}.{stream.table}")
        events_marker = public_sink.table_marker(events_table, stream.writer_id)
        if not commits.should_write(batch_id, events_marker):
            assert events_marker is not None
            # a replay of the batch the table holds, with its files (this path records the files of the batch's plan
            # when it can be read, else each file with a line, as the batch's _source_file names them): anything
            # else is a renumbered checkpoint
            plan = plan_files(batch)
            files = list(plan) if plan is not None else \
                [str(r[0]) for r in batch.select("_source_file").distinct().collect()]
            commits.check_replay(stream.name, stream.table, batch_id, events_marker, files,
                                 current_snapshot_id(events_table))
            log.info("batch %d already committed to %s by %s: skipped", batch_id, stream.table, stream.writer_id)
            return
        self.validator.with_extra = events_table.schema().findField(EXTRA_COLUMN) is not None
        now = datetime.now(UTC).replace(microsecond=0)
        time_field = stream.event_time_field
        lineage = [batch["_source_file"].alias("_file"), batch[SOURCE_SIZE].alias("_size"),
                   F.unix_millis(batch[LANDED_AT]).alias("_mtime")]
        plan = plan_files(batch)
        cached = self.validator.staged_rows(batch, batch_id, lineage, files=plan).persist(StorageLevel.MEMORY_AND_DISK)
        rows = cached
        try:
            micros = F.unix_micros(F.col(time_field))

            def aggregate(staged: DataFrame) -> list[Any]:
                return staged.groupBy(F.floor(micros / MICROS_PER_HOUR).alias("_hour"), "_file", "_size",
                                      "_mtime").agg(
                    F.count(F.col(time_field)).alias("valid"),
                    F.count(F.when(F.col(time_field).isNull() & F.col("_source_file").isNotNull(), 1))
                    .alias("rejected"),
                    F.min(micros).alias("low"), F.max(micros).alias("high"),
                ).collect()

            groups = listed = aggregate(rows)
            stats: dict[str, tuple[int, int]] = {
                str(g["_file"]): (int(g["_size"]), int(g["_mtime"])) for g in listed if g["_file"] is not None}
            for name, stat in (plan.stats.items() if plan is not None else ()):
                if name not in stats and stat.size > stream.max_line_bytes:  # no row: every line above the limit
                    stats[name] = (stat.size, stat.mtime_ms)
            # the lines above max_line_bytes the reader skipped, in files above it (nothing read for other batches)
            files = commits.SourceFiles(stats)
            long = long_lines.find(stream, files.stats)
            if long:  # what the reader left of them is replaced by the scan's rejects: aggregate again
                rows = long_lines.without_long_staged(cached, stream)
                groups = aggregate(rows)
            planned = time.monotonic()
            per_hour: dict[str, int] = {}
            rejected = len(long)
            lows = [int(g["low"]) for g in groups if g["low"] is not None]
            highs = [int(g["high"]) for g in groups if g["high"] is not None]
            for g in groups:
                rejected += int(g["rejected"])
                if g["valid"]:
                    key = summary_key(from_epoch_hours(int(g["_hour"])))
                    per_hour[key] = per_hour.get(key, 0) + int(g["valid"])
            valid = sum(per_hour.values())
            newest = _from_micros(max(highs) if highs else None)
            watermark = watermark_after(events_marker.watermark if events_marker else None, newest, now,
                                        stream.max_clock_skew)
            latest_by_file: dict[str, datetime] = {}
            for g in groups:
                high = _from_micros(g["high"])
                if g["_file"] is not None and high is not None:
                    latest_by_file[str(g["_file"])] = max(latest_by_file.get(str(g["_file"]), high), high)
            ahead = ahead_of_clock(latest_by_file, now, stream.max_clock_skew)
            extra: dict[str, Any] = {
                commits.VALID_ROWS: valid,
                commits.REJECTED_ROWS: rejected,
                commits.MIN_EVENT_TIME: _iso(_from_micros(min(lows) if lows else None)),
                commits.MAX_EVENT_TIME: _iso(newest),
                commits.WATERMARK: watermark,
                commits.AHEAD_OF_CLOCK: warn_ahead(stream, batch_id, ahead),
                **self.summary,
            }
            if rejected:
                rejects_marker = public_sink.table_marker(self._public.table(f"{self.prefix}.{stream.rejects_table}"),
                                                          stream.writer_id)
                if commits.should_write(batch_id, rejects_marker):
                    self._reject_public(rows, batch_id, now, files, rejected, extra, rejects_marker, long)
            else:
                # nothing staged for the rejects: pause here
                faults.maybe_pause("before_commit", batch_id, self.stream.name)
            faults.maybe_pause("between_tables", batch_id, self.stream.name)
            published = time.monotonic()
            props = commits.summary_properties(stream.writer_id, batch_id, files, per_hour, extra)
            table_columns = [*stream.fields, "_source_file", "_batch_id",
                             *([EXTRA_COLUMN] if self.validator.with_extra else [])]
            valid_rows = rows.where(F.col(time_field).isNotNull()).select(*table_columns)
            snapshot_id = self._publish_public(spark, stream.table, valid_rows, props, batch_id, events_marker,
                                               None)
        finally:
            cached.unpersist()
        faults.maybe_pause("after_commit", batch_id, self.stream.name)
        done = time.monotonic()
        log.info(
            "batch %d committed as snapshot %d: %d valid, %d rejected, %d files, watermark %s "
            "(public path: plan+aggregate %.2fs, rejects %.2fs, commit %.2fs; %.2fs)",
            batch_id, snapshot_id, valid, rejected, len(files), watermark, planned - started,
            published - planned, done - published, done - started,
        )
        batch_figures.record(stream.name, valid, rejected, done - started, watermark)

    def _reject_public(self, rows: DataFrame, batch_id: int, now: datetime, files: list[str], expected: int,
                       extra: dict[str, Any], marker: commits.Marker | None,
                       long: list[LongLine] | None = None) -> None:
        """The rejected lines to the rejects table through a staging branch (the public path's ``_reject``), read
        from the batch's cached staged ``rows`` (``Validator.rejects_of``), not from the batch; and the lines above
        ``max_line_bytes`` the reader skipped (``long``, from the driver's scan: ``long_lines.rejects``)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        stream = self.stream
        lines = self.validator.rejects_of(rows)
        if long:
            lines = lines.unionByName(long_lines.rejects(rows.sparkSession, stream, long))
        rejects = rejected_rows(lines, stream, batch_id, now, audit_hours(stream.landing_path, files)).persist(
            StorageLevel.MEMORY_AND_DISK)
        try:
            by_hour: dict[str, int] = {}
            hours = F.floor(F.unix_micros(F.col("event_hour")) / MICROS_PER_HOUR).alias("_hour")
            for row in rejects.groupBy(hours).count().collect():
                hour = row["_hour"]
                key = summary_key(None if hour is None else from_epoch_hours(int(hour)))
                by_hour[key] = by_hour.get(key, 0) + int(row["count"])
            if sum(by_hour.values()) != expected:
                raise RuntimeError(
                    f"batch {batch_id}: {sum(by_hour.values())} rejected lines found, {expected} expected "
                    "(lines without a valid event time): the two passes over the batch disagree; nothing was "
                    "committed"
                )
            props = commits.summary_properties(stream.writer_id, batch_id, files, by_hour, extra)
            self._publish_public(rows.sparkSession, stream.rejects_table, rejects, props, batch_id, marker,
                                 "before_commit")
        finally:
            rejects.unpersist()
