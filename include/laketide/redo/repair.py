"""Repair of re-sent data: remove duplicate event ids from chosen hours, keeping the first-ingested row.

A producer that re-sends files under new names gets every event ingested twice; the close's verification
catches it (the unique-id expectation fails) and the hour stays unclosed. A repair of the hours:

1. reads the hours' rows at the current snapshot and ranks the rows of each event id (:func:`ranked`): the
   first-ingested row is kept (smallest ``_batch_id``, then the landing file's name, then the row's content:
   a total, deterministic order);
2. a dry run reports how many rows per hour would be removed and stops;
3. otherwise the hours are replaced by the kept rows in one commit (``redo.overwrite.overwrite_hours``) whose
   summary counts the rows removed per hour (``laketide.duplicates-removed``: verification and
   reconciliation add them to the lake's count, since the producers' audit records still count the re-sent
   lines);
4. the committed snapshot is checked: every event id of the hours once, the planned rows per hour;
5. each hour is recorded ``reopened`` with the action; the close DAG verifies and closes it again.

Idempotent: a second repair finds no duplicate and commits nothing.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import ActionFailedError, ActionRequestError
from laketide.ingest.dedupe import hour_key
from laketide.lake.commits import DUPLICATES_REMOVED
from laketide.lake.hours import partition_key
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
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("laketide.redo.repair")

RANK = "_rank"


def ranked(rows: DataFrame, stream: StreamConfig) -> DataFrame:
    """``rows`` with ``_rank``: 1 for the first-ingested row of each event id, 2, 3, ... for its duplicates.

    Order: ``_batch_id`` (nulls last), then ``_source_file`` (landing names sort by hour, producer, sequence),
    then the row's content as JSON, so the same rows always keep the same row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    content = F.to_json(F.struct(*[F.col(f"`{c}`") for c in rows.columns]))
    order = Window.partitionBy(F.col(f"`{stream.event_id_field}`")).orderBy(
        F.col("_batch_id").asc_nulls_last(), F.col("_source_file").asc_nulls_last(), content)
    return rows.withColumn(RANK, F.row_number().over(order))


def first_ingested(rows: DataFrame, stream: StreamConfig) -> DataFrame:
    """``rows`` without duplicate event ids: the first-ingested row of each (see :func:`ranked`)."""
    from pyspark.sql import functions as F

    return ranked(rows, stream).where(F.col(RANK) == 1).drop(RANK)


def _counts(df: DataFrame, key: Column) -> dict[str, int]:
    return {row[0]: int(row[1]) for row in df.groupBy(key).count().collect() if row[0] is not None}


def reject_counts(spark: SparkSession, config: LaketideConfig, request: Request) -> dict[str, int]:
    """Rejected lines per hour of the request in the stream's rejects table (a reject's hour is its landing
    file's hour, ``ingest.transforms.rejected_rows``)."""
    from pyspark.sql import functions as F

    stream = request.stream
    name = quoted_table(config.catalog.name, stream.rejects_table)
    if current_snapshot(config, stream.rejects_table) is None:
        return {}
    rows = spark.table(name).where(F.expr(hours_condition("event_hour", request.hours)))
    return {k: n for k, n in _counts(rows, hour_key(F.col("event_hour"))).items() if k in
            {partition_key(h) for h in request.hours}}


def repair(spark: SparkSession, config: LaketideConfig, request: Request) -> Outcome:
    """Remove duplicate event ids from the hours of ``request`` (or count them, for a dry run).

    :raises ActionFailedError: the committed snapshot still holds duplicates or other counts than planned
    """
    from pyspark.sql import functions as F

    stream = request.stream
    name = quoted_table(config.catalog.name, stream.table)
    start = current_snapshot(config, stream.table)
    if start is None:
        raise ActionRequestError(f"table {stream.table} has no snapshot: nothing to repair")
    condition = hours_condition(stream.event_time_field, request.hours)
    key = hour_key(F.col(f"`{stream.event_time_field}`"))
    rows = spark.read.option("snapshot-id", str(start)).table(name).where(F.expr(condition))
    with_rank = ranked(rows, stream).persist()
    try:
        counts = with_rank.groupBy(key.alias("hour")).agg(
            F.count(F.lit(1)).alias("rows"), F.sum((F.col(RANK) > 1).cast("long")).alias("removed")).collect()
        changes = {partition_key(h): HourChange() for h in request.hours}
        for row in counts:
            change = changes[row["hour"]]
            change.rows_before, change.duplicates_removed = int(row["rows"]), int(row["removed"] or 0)
            change.rows_after = change.rows_before - change.duplicates_removed
        for hour, n in reject_counts(spark, config, request).items():  # a repair leaves the rejects as they are
            changes[hour].rejects_before = changes[hour].rejects_after = n
        outcome = Outcome(request, start, None, changes, committed=False)
        removed = {k: c.duplicates_removed for k, c in changes.items() if c.duplicates_removed}
        if not removed:
            outcome.notes.append("no duplicate event id in the range: nothing to repair")
            return outcome
        if request.dry_run:
            return outcome
        props = summary_properties(request, start, request.hours,
                                   {DUPLICATES_REMOVED: json.dumps(removed, sort_keys=True)})
        overwrite_hours(with_rank.where(F.col(RANK) == 1).drop(RANK), name, condition, start, props, config)
    finally:
        with_rank.unpersist()
    outcome.to_snapshot = current_snapshot(config, stream.table)
    outcome.committed = True
    check(spark, name, outcome, stream)
    return outcome


def check(spark: SparkSession, name: str, outcome: Outcome, stream: StreamConfig) -> None:
    """The committed snapshot holds each event id of the hours once, and the planned rows per hour.

    :raises ActionFailedError: naming what differs
    """
    from pyspark.sql import functions as F

    rows = (spark.read.option("snapshot-id", str(outcome.to_snapshot)).table(name)
            .where(F.expr(hours_condition(stream.event_time_field, outcome.request.hours))))
    ids = F.col(f"`{stream.event_id_field}`")
    total, distinct = rows.agg(F.count(F.lit(1)), F.countDistinct(ids)).first()  # type: ignore[misc]
    got = _counts(rows, hour_key(F.col(f"`{stream.event_time_field}`")).alias("k"))
    wrong = {k: (c.rows_after, got.get(k, 0)) for k, c in outcome.hours.items() if got.get(k, 0) != c.rows_after}
    if total != distinct or wrong:
        raise ActionFailedError(
            f"{outcome.request.describe()} committed snapshot {outcome.to_snapshot}, but the check failed: "
            f"{total - distinct} duplicate id(s) left, rows per hour (planned, found) {wrong}. Roll the table back "
            f"to snapshot {outcome.from_snapshot} (the redo DAG) and report it")
