"""The exactly-once Structured Streaming writer: landing zone -> events table + rejects table.

``extract`` reads the landing zone's data files as lines, ``parse_lines`` is a pure DataFrame ->
DataFrame transform (parse + validate, one reason per bad line), and :class:`BatchWriter` is the
``foreachBatch`` sink that commits each micro-batch to both tables idempotently (see ``laketide.commits``).
"""

from __future__ import annotations

import json
import logging
import signal
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from laketide import commits, faults
from laketide.catalog import load_catalog
from laketide.config import LaketideConfig, StreamConfig
from laketide.landing import data_dir, partition_key

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger("laketide.writer")

Mode = Literal["continuous", "incremental"]
SPARK_TYPES = {
    "string": "string", "long": "bigint", "int": "int", "double": "double",
    "boolean": "boolean", "timestamp": "timestamp",
}
EVENTS_PROPERTIES = {
    "format-version": "2",
    # no shuffle before the write: a fanout writer keeps one file open per hour instead
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    # pre-commit = a staged snapshot (write-audit-publish) when the writer sets spark.wap.id
    "write.wap.enabled": "true",
}
REJECTS_COLUMNS = (
    "raw string, reason string, source_file string, event_hour timestamp, "
    "batch_id bigint, writer_id string, rejected_at timestamp"
)
CORRUPT = "_corrupt_record"
WAP_ID = "wap.id"
STRICT_JSON = {"allowSingleQuotes": "false"}


def record_schema(stream: StreamConfig) -> StructType:
    """The typed record schema of a stream, plus Spark's corrupt-record column."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    schema = StructType()
    for name, spec in stream.fields.items():
        schema.add(name, _parse_datatype_string(SPARK_TYPES[spec.type]), nullable=True)
    schema.add(CORRUPT, "string", nullable=True)
    return schema


def _human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0 and seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _reason(stream: StreamConfig, parsed: Column, raw: Column, now: datetime) -> Column:
    """First problem of a line, or null when the line is a valid event."""
    from pyspark.sql import functions as F

    # Valid lines must stay cheap: every expensive probe (a second JSON parse) sits behind a cheap
    # condition on the parsed struct, and And short-circuits left to right.
    corrupt = parsed.isNull() | parsed[CORRUPT].isNotNull()
    opens_object = raw.startswith("{") | F.ltrim(raw).startswith("{")
    # The text source keeps raw bytes. The JSON reader decodes an invalid sequence to U+FFFD, inside a
    # string value (found in the parsed strings) or elsewhere (the line does not parse). Only then is the
    # exact test run: re-encoding through a Java string changes a line with invalid bytes.
    replaced = [F.instr(parsed[n], "\ufffd") > 0 for n, spec in stream.fields.items() if spec.type == "string"]
    suspicious = corrupt
    for probe in replaced:
        suspicious = suspicious | probe
    checks: list[Column] = [
        F.when(suspicious & (raw.cast("binary") != F.encode(raw, "UTF-8")), F.lit("invalid UTF-8 encoding")),
        F.when(corrupt & F.get_json_object(raw, "$").isNull(), F.lit("malformed JSON")),
        # lenient readers accept e.g. single quotes; a strict re-parse of the bad lines tells
        F.when(
            corrupt & opens_object & F.from_json(raw, "map<string,string>", STRICT_JSON).isNull(),
            F.lit("malformed JSON"),
        ),
        F.when(parsed.isNull() | ~opens_object, F.lit("not a JSON object")),
    ]
    for name, spec in stream.fields.items():
        # null in the struct but present in the line: a wrong type (an omitted optional field is fine)
        mentioned = F.instr(raw, f'"{name}"') > 0
        present = F.get_json_object(raw, f"$.{name}").isNotNull()
        checks.append(
            F.when(parsed[name].isNull() & mentioned & present, F.lit(f"field {name!r} is not a valid {spec.type}"))
        )
    for name, spec in stream.fields.items():
        if spec.required:
            checks.append(F.when(parsed[name].isNull(), F.lit(f"missing required field {name!r}")))
    event_time = parsed[stream.event_time_field]
    low = datetime.fromisoformat(stream.min_event_time)
    high = now + stream.max_future
    checks.append(
        F.when(
            (event_time < F.lit(low)) | (event_time > F.lit(high)),
            F.concat(
                F.lit(f"event time out of range [{low.isoformat()}, processing time + {_human(stream.max_future)}]: "),
                F.date_format(event_time, "yyyy-MM-dd'T'HH:mm:ssXXX"),
            ),
        )
    )
    checks.append(F.when(parsed[CORRUPT].isNotNull(), F.lit("malformed record")))
    return F.coalesce(*checks)


def parse_lines(lines: DataFrame, stream: StreamConfig, now: datetime) -> DataFrame:
    """Parse and validate landing lines.

    :param lines: columns ``value`` (one line) and ``_source_file`` (landing file name); blank lines are
        not records and are dropped.
    :param now: processing time, the reference for rejecting event times from the future.
    :return: the stream's fields, plus ``_raw``, ``_source_file`` and ``_error`` (null when valid).
    """
    from pyspark.sql import functions as F

    raw = F.col("value")
    parsed = F.from_json(raw, record_schema(stream), {
        "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **STRICT_JSON,
    })
    # a line opening an object is never blank: only the others pay for the trim
    not_blank = (F.octet_length(raw) > 0) & (raw.startswith("{") | (F.trim(raw) != ""))
    with_struct = lines.where(not_blank).select(raw.alias("_raw"), F.col("_source_file"), parsed.alias("_p"))
    p = F.col("_p")
    return with_struct.select(
        *[p[name].alias(name) for name in stream.fields],
        F.col("_raw"),
        F.col("_source_file"),
        _reason(stream, p, F.col("_raw"), now).alias("_error"),
    )


def valid_rows(parsed: DataFrame, stream: StreamConfig, batch_id: int) -> DataFrame:
    """Rows for the events table: the stream's fields plus lineage columns."""
    from pyspark.sql import functions as F

    return parsed.where(F.col("_error").isNull()).select(
        *stream.fields, "_source_file", F.lit(batch_id).cast("bigint").alias("_batch_id")
    )


def rejected_rows(parsed: DataFrame, stream: StreamConfig, batch_id: int, now: datetime) -> DataFrame:
    """Rows for the rejects table: the raw line, the reason, where it came from, and the hour of its event
    time when one can be read (reconciliation attributes rejects through their source file)."""
    from pyspark.sql import functions as F

    time_field = stream.event_time_field
    loose = F.to_timestamp(F.get_json_object(F.col("_raw"), f"$.{time_field}"))
    return parsed.where(F.col("_error").isNotNull()).select(
        F.col("_raw").alias("raw"),
        F.col("_error").alias("reason"),
        F.col("_source_file").alias("source_file"),
        F.date_trunc("hour", F.coalesce(F.col(time_field), loose)).alias("event_hour"),
        F.lit(batch_id).cast("bigint").alias("batch_id"),
        F.lit(stream.writer_id).alias("writer_id"),
        F.lit(now).alias("rejected_at"),
    )


def _utc(value: datetime) -> datetime:
    """PySpark hands timestamps back as naive local times; Python reads naive as local too."""
    return value.astimezone(UTC)


def summary_key(hour: datetime | None) -> str:
    """Partition key of an hour in summaries (``landing.partition_key``), or 'unknown'."""
    return "unknown" if hour is None else partition_key(_utc(hour))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else _utc(value).isoformat()


def _from_micros(value: Any) -> datetime | None:
    if value is None:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(value))


def _later(*values: str | None) -> str | None:
    """The latest of ISO UTC timestamps written by ``_iso`` (same format, so text order is time order)."""
    present = [v for v in values if v]
    return max(present) if present else None


class BatchWriter:
    """``foreachBatch`` sink: a two-phase commit of each micro-batch, once.

    1. pre-commit: the valid rows are written in ONE pass over the batch as a *staged* Iceberg snapshot
       (write-audit-publish: data files and manifests exist, the table does not show them); the batch's
       counts and event-time range are observed during that same pass;
    2. the rejects, if any, are committed to the rejects table (a second pass, only for batches with
       rejects);
    3. commit: one atomic catalog swap publishes the staged files to the events table with the full
       summary (writer id, batch id, source files, rows per partition, event-time range, watermark).

    A replayed batch already committed is skipped (``commits.should_write``); a staged snapshot whose
    batch never got published is invisible, and its files are orphans for the cleaner.
    """

    def __init__(self, config: LaketideConfig, stream: StreamConfig) -> None:
        self.config = config
        self.stream = stream
        self.catalog = load_catalog(config.catalog)
        self.prefix = config.catalog.name

    def marker(self, table: str) -> commits.Marker | None:
        snapshots, current = commits.pyiceberg_snapshots(self.catalog.load_table(table))
        return commits.last_marker(snapshots, current, self.stream.writer_id)

    def _append(self, df: DataFrame, table: str, props: dict[str, str]) -> None:
        writer = df.writeTo(f"{self.prefix}.{table}")
        for key, value in props.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.append()

    def _stage(self, df: DataFrame, wap_id: str) -> int:
        """Write ``df`` as a staged snapshot of the events table; return its id."""
        spark = df.sparkSession
        spark.conf.set("spark.wap.id", wap_id)
        try:
            df.writeTo(f"{self.prefix}.{self.stream.table}").append()
        finally:
            spark.conf.unset("spark.wap.id")
        table = self.catalog.load_table(self.stream.table)
        for snap in reversed(table.metadata.snapshots):
            if snap.summary is not None and snap.summary.additional_properties.get(WAP_ID) == wap_id:
                return snap.snapshot_id
        raise RuntimeError(f"staged snapshot {wap_id} not found in {self.stream.table}")

    def _publish(self, spark: SparkSession, staged_id: int, extra: dict[str, Any], files: list[str],
                 batch_id: int) -> int:
        """Append the staged data files to the events table in one commit carrying the full summary;
        return the new snapshot id."""
        jvm: Any = spark._jvm
        jtable = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, f"{self.prefix}.{self.stream.table}"
        )
        staged = jtable.snapshot(staged_id)
        integer = jvm.java.lang.Class.forName("java.lang.Integer")
        append = jtable.newFastAppend()
        rows: dict[str, int] = {}
        it = staged.addedDataFiles(jtable.io()).iterator()
        while it.hasNext():
            data_file = it.next()
            append.appendFile(data_file)
            hour = data_file.partition().get(0, integer)  # hours since the epoch (hours transform)
            key = "unknown" if hour is None else partition_key(datetime.fromtimestamp(hour * 3600, UTC))
            rows[key] = rows.get(key, 0) + int(data_file.recordCount())
        props = commits.summary_properties(self.stream.writer_id, batch_id, files, rows, extra)
        for key, value in props.items():
            append.set(key, value)
        append.commit()
        return int(jtable.currentSnapshot().snapshotId())

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        faults.maybe_pause("batch_start", batch_id)
        started = time.monotonic()
        stream = self.stream
        events_marker = self.marker(stream.table)
        if not commits.should_write(batch_id, events_marker):
            log.info("batch %d already committed to %s by %s: skipped", batch_id, stream.table, stream.writer_id)
            return
        now = datetime.now(UTC).replace(microsecond=0)
        parsed = parse_lines(batch, stream, now)
        ok = F.col("_error").isNull()
        et = F.col(stream.event_time_field)
        observation = Observation(f"laketide-{stream.name}-{batch_id}")
        observed = parsed.observe(
            observation,
            F.sum(F.when(ok, 1).otherwise(0)).alias("valid"),
            F.sum(F.when(ok, 0).otherwise(1)).alias("rejected"),
            # as epoch microseconds: observed metrics come back through py4j untyped
            F.unix_micros(F.min(F.when(ok, et))).alias("lo"),
            F.unix_micros(F.max(F.when(ok, et))).alias("hi"),
            F.to_json(F.collect_set("_source_file")).alias("files"),
        )
        wap_id = f"{stream.writer_id}:{batch_id}:{uuid.uuid4().hex[:12]}"
        planned = time.monotonic()
        staged_id = self._stage(valid_rows(observed, stream, batch_id), wap_id)
        staged = time.monotonic()
        stats = observation.get
        valid, rejected = int(stats.get("valid") or 0), int(stats.get("rejected") or 0)
        files = sorted(json.loads(stats.get("files") or "[]"))
        faults.maybe_pause("before_commit", batch_id)

        batch_max = _iso(_from_micros(stats.get("hi")))
        watermark = _later(events_marker.watermark if events_marker else None, batch_max)
        extra: dict[str, Any] = {
            commits.VALID_ROWS: valid,
            commits.REJECTED_ROWS: rejected,
            commits.MIN_EVENT_TIME: _iso(_from_micros(stats.get("lo"))),
            commits.MAX_EVENT_TIME: batch_max,
            commits.WATERMARK: watermark,
        }
        if rejected and commits.should_write(batch_id, self.marker(stream.rejects_table)):
            rejects = rejected_rows(parse_lines(batch, stream, now), stream, batch_id, now).cache()
            try:
                by_hour = {summary_key(r["event_hour"]): r["n"]
                           for r in rejects.groupBy("event_hour").agg(F.count(F.lit(1)).alias("n")).collect()}
                props = commits.summary_properties(stream.writer_id, batch_id, files, by_hour, extra)
                self._append(rejects, stream.rejects_table, props)
            finally:
                rejects.unpersist()
        faults.maybe_pause("between_tables", batch_id)
        published = time.monotonic()
        snapshot_id = self._publish(batch.sparkSession, staged_id, extra, files, batch_id)
        faults.maybe_pause("after_commit", batch_id)
        done = time.monotonic()
        log.info(
            "batch %d committed as snapshot %d: %d valid, %d rejected, %d files, watermark %s "
            "(plan %.2fs, pre-commit %.2fs, rejects %.2fs, commit %.2fs; %.2fs)",
            batch_id, snapshot_id, valid, rejected, len(files), watermark, planned - started, staged - planned,
            published - staged, done - published, done - started,
        )


def ensure_tables(spark: SparkSession, config: LaketideConfig, stream: StreamConfig) -> None:
    """Create the namespace, events table (hidden partition: hour of event time) and rejects table."""
    cat = config.catalog.name
    columns = ", ".join(f"`{n}` {SPARK_TYPES[s.type]}" for n, s in stream.fields.items())
    props = ", ".join(f"'{k}'='{v}'" for k, v in EVENTS_PROPERTIES.items())
    for ns in sorted({stream.table.split(".")[0], stream.rejects_table.split(".")[0]}):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat}.{ns}")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {cat}.{stream.table} ({columns}, _source_file string, _batch_id bigint) "
        f"USING iceberg PARTITIONED BY (hours(`{stream.event_time_field}`)) TBLPROPERTIES ({props})"
    )
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {cat}.{stream.rejects_table} ({REJECTS_COLUMNS}) "
        f"USING iceberg PARTITIONED BY (hours(event_hour)) TBLPROPERTIES ({props})"
    )


def extract(spark: SparkSession, stream: StreamConfig) -> DataFrame:
    """Landing data files as a stream of lines with their file name."""
    from pyspark.sql import functions as F

    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True, exist_ok=True)
    return (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", stream.max_files_per_trigger)
        .option("pathGlobFilter", "*.jsonl")
        .load(str(folder))
        .select("value", F.col("_metadata.file_name").alias("_source_file"))
    )


def preflight(config: LaketideConfig, stream: StreamConfig) -> None:
    """Refuse to start when checkpoint and table disagree (see ``commits.check_checkpoint``)."""
    table = load_catalog(config.catalog).load_table(stream.table)
    snapshots, current = commits.pyiceberg_snapshots(table)
    marker = commits.last_marker(snapshots, current, stream.writer_id)
    state = commits.read_checkpoint(stream.checkpoint_path)
    commits.check_checkpoint(stream.table, stream.writer_id, stream.checkpoint_path, state, marker)


def stop_file(stream: StreamConfig) -> Path:
    """Create this file to ask a running writer to stop between batches."""
    return stream.checkpoint_path.parent / f"{stream.name}.stop"


def start(spark: SparkSession, config: LaketideConfig, stream: StreamConfig, mode: Mode) -> StreamingQuery:
    writer = (
        extract(spark, stream).writeStream.foreachBatch(BatchWriter(config, stream))
        .option("checkpointLocation", str(stream.checkpoint_path))
        .queryName(f"laketide-{stream.name}")
    )
    if mode == "incremental":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(stream.trigger_interval.total_seconds())} seconds")
    return writer.start()


def run(config: LaketideConfig, stream: StreamConfig, mode: Mode, spark: SparkSession | None = None) -> None:
    """Run the writer of ``stream`` until it is done (incremental) or asked to stop (continuous)."""
    from laketide.spark import build_session

    spark = spark or build_session(config, f"laketide-ingest-{stream.name}")
    ensure_tables(spark, config, stream)
    preflight(config, stream)
    flag = stop_file(stream)
    flag.unlink(missing_ok=True)
    stopping: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    query = start(spark, config, stream, mode)
    log.info("writer %s started in %s mode: %s -> %s", stream.writer_id, mode, stream.landing_path, stream.table)
    try:
        while not query.awaitTermination(1):
            if flag.exists() and not stopping:
                stopping.append(f"stop file {flag}")
            if stopping and not query.status["isTriggerActive"]:
                log.info("stopping between batches (%s)", stopping[0])
                query.stop()
                flag.unlink(missing_ok=True)
                break
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    progress = query.lastProgress
    log.info("writer %s finished; last progress: %s", stream.writer_id, json.dumps(progress or {})[:500])
