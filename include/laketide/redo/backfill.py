"""Backfill of an hour range: re-ingest the hours' landing files as an atomic overwrite of exactly those hours.

For a validated request (``redo.overwrite.validate_request`` and ``check_against_table``):

1. the files: every landing file the writer ingested whose hour (by name, else by audit record) is in the
   range (:func:`plan_files`). A file of the range the writer has not ingested yet is left to the writer; an
   ingested file no longer in ``data/`` nor in the archive refuses the backfill (its rows would be lost);
2. the rows: those files read and parsed exactly as the writer does (``ingest.transforms.Validator``,
   ``rejected_rows``); the rows keep the batch id of their file's first ingestion (and the rejects their
   time of rejection), so a second backfill writes the same rows. For a stream with ``dedupe_on_write``, an
   event id held twice in an hour keeps its first-ingested row, as the writer would have, and the commit
   counts the others (``laketide.duplicates-dropped``);
3. the rejects table, then the events table, each replaced in one commit (``redo.overwrite.overwrite_hours``):
   the events' hour partitions of the range, and the rejects' partitions holding rejects of those files (the
   null hour included), keeping rows that came from other files. A crash between the two commits is repaired
   by running the backfill again: both commits are idempotent;
4. the rows per hour are checked against what was planned, and each hour is recorded ``reopened`` in the
   status table with the action (the close DAG verifies and closes it again).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laketide.close.archive import archive_lock
from laketide.config import EXTRA_COLUMN, LaketideConfig, StreamConfig
from laketide.errors import ActionFailedError, ActionRequestError
from laketide.ingest.dedupe import hour_key
from laketide.ingest.faultpoints import maybe_pause
from laketide.ingest.landing import data_dir, hidden, landed_path, name_hour, published_files, read_audits
from laketide.lake.commits import DUPLICATES_DROPPED, SOURCE_FILES
from laketide.lake.hours import partition_key
from laketide.lake.spark import local_frame
from laketide.redo.overwrite import (
    HourChange,
    Outcome,
    Request,
    current_snapshot,
    hours_condition,
    overwrite_hours,
    quoted_table,
    summary_properties,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("laketide.redo.backfill")

#: summary key: the id of the backfill that made the commit
BACKFILL_ID = "laketide.backfill-id"


def file_hour(name: str, audits: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The hour (partition key) a landing file belongs to: from its name, else from its audit record (the
    earliest hour it names); None when neither tells."""
    by_name = name_hour(name)
    if by_name is not None:
        return by_name
    parts = (audits.get(name) or {}).get("partitions") or {}
    return min(parts) if parts else None


@dataclass(frozen=True)
class FilePlan:
    """The landing files of a backfill."""

    #: ingested files of the range, in ``data/`` or archived: re-read
    files: tuple[str, ...]
    #: ingested files of the range in neither ``data/`` nor the archive: the backfill is refused
    missing: tuple[str, ...] = ()
    #: files of the range in ``data/`` the writer has not ingested yet: left to the writer
    pending: tuple[str, ...] = ()
    #: file -> its hour
    hours: dict[str, str] = field(default_factory=dict)


def plan_files(hours: Iterable[datetime], ingested: Collection[str], present: Collection[str],
               audits: Mapping[str, Mapping[str, Any]]) -> FilePlan:
    """Which landing files a backfill of ``hours`` reads (see :class:`FilePlan`)."""
    keys = {partition_key(h) for h in hours}
    of_range = {n: h for n in set(ingested) | set(present) if (h := file_hour(n, audits)) in keys}
    files = sorted(n for n in of_range if n in ingested and n in present)
    missing = sorted(n for n in of_range if n in ingested and n not in present)
    pending = sorted(n for n in of_range if n not in ingested and n in present and not hidden(n))
    return FilePlan(tuple(files), tuple(missing), tuple(pending), {n: of_range[n] for n in files})


def check_files(request: Request, plan: FilePlan) -> None:
    """Refuse a backfill that would lose rows: an ingested file of the range is gone from ``data/``.

    :raises ActionRequestError: naming the files and what to do
    """
    if plan.missing:
        shown = ", ".join(plan.missing[:5]) + (" ..." if len(plan.missing) > 5 else "")
        raise ActionRequestError(
            f"{len(plan.missing)} landing file(s) of the range were ingested but are no longer in "
            f"{data_dir(request.stream.landing_path)} nor in its hour's archive folder ({shown}): a backfill would "
            "drop their rows. Restore them "
            "(with their audit records), or repair the hours instead")


def ingested_files(config: LaketideConfig, stream: StreamConfig) -> set[str]:
    """The landing files the writer ingested, from the events table's snapshot summaries (metadata only)."""
    from laketide.lake.catalog import load_catalog
    from laketide.lake.commits import source_positions

    return set(source_positions(load_catalog(config.catalog).load_table(stream.table)))


def prepare(config: LaketideConfig, request: Request) -> FilePlan:
    """The checks a backfill needs from the landing zone and the metadata, before Spark starts.

    :raises ActionRequestError: the files refuse it (see :func:`check_files`)
    """
    stream = request.stream
    keys = {partition_key(h) for h in request.hours}  # closed hours' files are in their archive folders
    audits = read_audits(stream.landing_path, hidden=True, archived=keys)
    plan = plan_files(request.hours, ingested_files(config, stream), published_files(stream.landing_path, keys),
                      audits)
    check_files(request, plan)
    return plan


# ---------------------------------------------------------------- Spark: the transforms and the commits


def read_lines(spark: SparkSession, stream: StreamConfig, files: Iterable[str]) -> DataFrame:
    """The lines of ``files`` (names in ``data/`` or its hour's archive folder) exactly as the writer's stream reads
    them: ``value``, ``_source_file`` and ``_landed_at`` (the file's modification time)."""
    from pyspark.sql import functions as F

    from laketide.ingest.columns import LANDED_AT

    paths = [str(landed_path(stream.landing_path, name)) for name in files]
    return spark.read.format("text").load(paths).select(
        "value", F.col("_metadata.file_name").alias("_source_file"),
        F.col("_metadata.file_modification_time").alias(LANDED_AT))


def batches_of_files(config: LaketideConfig, stream: StreamConfig) -> dict[str, int]:
    """The batch id of each landing file's first ingestion by the stream's writer, from the events table's
    snapshot summaries (metadata only; commits removed by expiry are not seen)."""
    from laketide.lake.catalog import load_catalog
    from laketide.lake.commits import BATCH_ID, WRITER_ID, source_position
    from laketide.lake.snapshots import lineage_summaries

    found: dict[str, int] = {}
    for summary in lineage_summaries(load_catalog(config.catalog).load_table(stream.table)):  # newest first
        if summary.get(WRITER_ID) == stream.writer_id and BATCH_ID in summary:
            for name in source_position(summary):
                found[name] = int(summary[BATCH_ID])
    return found


def first_ingestion(events: DataFrame, rejects: DataFrame, files: Collection[str],
                    batches: Mapping[str, int] | None = None) -> DataFrame:
    """Per landing file of ``files``: the batch id of its first ingestion and when its lines were first
    rejected (``_source_file``, ``_batch_id``, ``rejected_at``), from the writer's commits (``batches``:
    :func:`batches_of_files`) and the rows the tables hold."""
    from pyspark.sql import functions as F

    wanted = list(files)
    spark = events.sparkSession
    chosen = set(wanted)
    recorded = local_frame(spark, [(n, int(b)) for n, b in (batches or {}).items() if n in chosen],
                           "_source_file string, _batch_id bigint") \
        .withColumn("rejected_at", F.lit(None).cast("timestamp"))
    by_events = (events.where(F.col("_source_file").isin(wanted)).groupBy("_source_file")
                 .agg(F.min("_batch_id").alias("_batch_id"), F.lit(None).cast("timestamp").alias("rejected_at")))
    by_rejects = (rejects.where(F.col("source_file").isin(wanted))
                  .groupBy(F.col("source_file").alias("_source_file"))
                  .agg(F.min("batch_id").alias("_batch_id"), F.min("rejected_at").alias("rejected_at")))
    return (by_events.unionByName(by_rejects).unionByName(recorded).groupBy("_source_file")
            .agg(F.min("_batch_id").alias("_batch_id"), F.min("rejected_at").alias("rejected_at")))


def parse(lines: DataFrame, stream: StreamConfig, origin: DataFrame, now: datetime,
          file_hours: Mapping[str, str] | None = None, with_extra: bool = False) -> tuple[DataFrame, DataFrame]:
    """The events and rejects rows of ``lines`` as the writer would write them; each row takes the batch id
    (and a reject its rejection time) of its file's first ingestion from ``origin`` (:func:`first_ingestion`).

    :param with_extra: the events table has the catch-all column ``_extra`` (the rows carry it)
    :return: (events rows: the stream's fields, ``_source_file``, ``_batch_id`` (, ``_extra``); rejects rows)
    """
    from pyspark.sql import functions as F

    from laketide.ingest.rejects import rejected_rows
    from laketide.ingest.transforms import Validator

    validator = Validator(stream)
    validator.with_extra = with_extra
    parsed = validator.parse_lines(lines)
    known = F.broadcast(origin)
    events = (parsed.where(F.col("_error").isNull()).join(known, "_source_file", "left")
              .select(*[F.col(n) for n in stream.fields], "_source_file", "_batch_id",
                      *([EXTRA_COLUMN] if with_extra else [])))
    rejects = rejected_rows(parsed, stream, -1, now,
                            {n: h for n, h in (file_hours or {}).items() if name_hour(n) is None})
    rejects = (rejects.join(known.withColumnRenamed("_source_file", "source_file")
                            .withColumnRenamed("rejected_at", "_first_rejected"), "source_file", "left")
               .select("raw", "raw_bytes", "reason", "source_file", "event_hour",
                       F.coalesce(F.col("_batch_id"), F.col("batch_id")).alias("batch_id"), "writer_id",
                       F.coalesce(F.col("_first_rejected"), F.col("rejected_at")).alias("rejected_at")))
    return events, rejects


def _counts(df: DataFrame, key: Any) -> dict[str, int]:
    return {row[0]: int(row[1]) for row in df.groupBy(key.alias("k")).count().collect() if row[0] is not None}


def backfill(spark: SparkSession, config: LaketideConfig, request: Request, plan: FilePlan) -> Outcome:
    """Run (or, for a dry run, plan and count) the backfill of ``request`` with the files of ``plan``.

    The landing zone's archive lock is held throughout (``close.archive.archive_lock``): Spark reads a file at the
    path it was given when the job was built, so a sweep that moved one of the files into its hour's archive folder
    meanwhile would fail the backfill. A sweep (a close's, or ``./laketide archive``) skips the zone while a backfill
    runs; a backfill waits for a sweep under way.

    :raises ActionFailedError: the committed rows per hour differ from the planned ones
    """
    with archive_lock(request.stream.landing_path, wait=True):
        return _backfill(spark, config, request, plan)


def _backfill(spark: SparkSession, config: LaketideConfig, request: Request, plan: FilePlan) -> Outcome:
    from pyspark.sql import functions as F

    from laketide.ingest.tables import ensure_tables

    stream = request.stream
    cat = config.catalog.name
    events_name, rejects_name = quoted_table(cat, stream.table), quoted_table(cat, stream.rejects_table)
    ensure_tables(spark, config, stream)  # a rejects table older than its current columns gets them
    events_from = current_snapshot(config, stream.table)
    rejects_from = current_snapshot(config, stream.rejects_table)
    if events_from is None:
        raise ActionRequestError(f"table {stream.table} has no snapshot: nothing to backfill")
    time_col = F.col(f"`{stream.event_time_field}`")
    in_range = hours_condition(stream.event_time_field, request.hours)
    keys = {partition_key(h) for h in request.hours}
    files = list(plan.files)

    events_at = spark.read.option("snapshot-id", str(events_from)).table(events_name)
    if rejects_from is not None:
        rejects_at = spark.read.option("snapshot-id", str(rejects_from)).table(rejects_name)
    else:
        rejects_at = spark.table(rejects_name).limit(0)
    existing = events_at.where(F.expr(in_range))
    now = datetime.now(UTC).replace(microsecond=0)
    if files:
        origin = first_ingestion(existing, rejects_at, files, batches_of_files(config, stream))
        parsed, new_rejects = parse(read_lines(spark, stream, files), stream, origin, now, plan.hours,
                                    EXTRA_COLUMN in spark.table(events_name).columns)
        maybe_pause("backfill_read", 0, stream.name)  # the files' paths are fixed, none is read yet
    else:
        parsed = spark.table(events_name).limit(0)
        new_rejects = rejects_at.limit(0)
    ours = F.col("_source_file").isin(files) if files else F.lit(False)
    kept = existing.where(F.col("_source_file").isNull() | ~ours)
    # rows written before a schema change read at their snapshot's schema: an added column is null, a widened one
    # is widened by the union
    new_events = parsed.where(F.expr(in_range)).unionByName(kept, allowMissingColumns=True)
    outside = parsed.where(~F.expr(in_range)).count() if files else 0
    dropped: dict[str, int] = {}
    if stream.dedupe_on_write:  # as the writer would have: the first-ingested row of each id in its hour
        from pyspark.sql import Window

        order = Window.partitionBy(F.col(f"`{stream.event_id_field}`"), hour_key(time_col)).orderBy(
            F.col("_batch_id").asc_nulls_last(), F.col("_source_file").asc_nulls_last(),
            *[F.col(f"`{c}`").asc_nulls_last() for c in stream.fields])
        marked = new_events.withColumn("_n", F.row_number().over(order))
        dropped = _counts(marked.where(F.col("_n") > 1), hour_key(time_col))
        new_events = marked.where(F.col("_n") == 1).drop("_n")

    changes = {k: HourChange() for k in sorted(keys)}
    for k, n in dropped.items():
        changes[k].duplicates_removed = n
    for k, n in _counts(existing, hour_key(time_col)).items():
        changes[k].rows_before = n
    for k, n in _counts(new_events, hour_key(time_col)).items():
        changes[k].rows_after = n
    # rejects per hour: attributed through the hour of their file (a landing file holds one hour)
    file_hours = local_frame(spark, list(plan.hours.items()), "source_file string, _hour string") if files else None
    old_ours = rejects_at.where(F.col("source_file").isin(files)) if files else rejects_at.limit(0)
    if file_hours is not None:
        for k, n in _counts(old_ours.join(F.broadcast(file_hours), "source_file"), F.col("_hour")).items():
            changes[k].rejects_before = n
        for k, n in _counts(new_rejects.join(F.broadcast(file_hours), "source_file"), F.col("_hour")).items():
            changes[k].rejects_after = n

    outcome = Outcome(request, events_from, None, changes, committed=False)
    if plan.pending:
        outcome.notes.append(f"{len(plan.pending)} landed file(s) of the range not ingested yet are left to the "
                             f"writer: {', '.join(plan.pending[:5])}")
    if outside:
        outcome.notes.append(f"{outside} valid row(s) of these files have event times outside the range (files "
                             "holding several hours): left as the writer wrote them")
    if request.dry_run:
        return outcome

    # the files it re-read, like the writer's source positions (verification and reconciliation read them)
    extra = {BACKFILL_ID: request.action_id, SOURCE_FILES: json.dumps(sorted(files), separators=(",", ":"))}
    if dropped:
        extra[DUPLICATES_DROPPED] = json.dumps(dict(sorted(dropped.items())), separators=(",", ":"))
    props = summary_properties(request, events_from, request.hours, extra)
    # the rejects' partitions to replace: the hours holding rejects of these files, before and after, and null
    reject_hours = {r[0] for r in old_ours.select("event_hour").union(new_rejects.select("event_hour"))
                    .distinct().collect()}
    if reject_hours:
        hours = sorted(h.astimezone(UTC) for h in reject_hours if h is not None)  # naive: local time (TZ=UTC)
        condition = hours_condition("event_hour", hours, with_null=None in reject_hours)
        rejects_kept = rejects_at.where(F.expr(condition)).where(~F.col("source_file").isin(files))
        if rejects_from is None:
            raise ActionFailedError(f"{stream.rejects_table} has no snapshot while rejects of the range exist")
        overwrite_hours(new_rejects.unionByName(rejects_kept), rejects_name, condition, rejects_from, props,
                        config)
        log.info("%s: rejects table %s replaced", request.describe(), stream.rejects_table)
    overwrite_hours(new_events, events_name, in_range, events_from, props, config)
    outcome.to_snapshot = current_snapshot(config, stream.table)
    outcome.committed = True
    check_rows(spark, events_name, outcome, stream)
    return outcome


def check_rows(spark: SparkSession, events_name: str, outcome: Outcome, stream: StreamConfig) -> None:
    """The committed snapshot holds the planned rows per hour.

    :raises ActionFailedError: naming the hours that differ
    """
    from pyspark.sql import functions as F

    at = spark.read.option("snapshot-id", str(outcome.to_snapshot)).table(events_name)
    got = _counts(at.where(F.expr(hours_condition(stream.event_time_field, outcome.request.hours))),
                  hour_key(F.col(f"`{stream.event_time_field}`")))
    wrong = {k: (c.rows_after, got.get(k, 0)) for k, c in outcome.hours.items() if got.get(k, 0) != c.rows_after}
    if wrong:
        raise ActionFailedError(
            f"{outcome.request.describe()} committed snapshot {outcome.to_snapshot}, but its rows per hour differ "
            f"from the plan (planned, found): {wrong}. Roll the table back to snapshot {outcome.from_snapshot} "
            "(the redo DAG) and report it")
