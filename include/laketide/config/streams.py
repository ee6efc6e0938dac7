"""The ``streams`` section: one model per event stream and its record fields."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from laketide.config.markers import DoneMarkersConfig
from laketide.config.upsert import DELETE_OPERATIONS, UPSERT_OPERATIONS, UpsertConfig, check_upsert
from laketide.config.values import (
    _IDENT,
    _absolute,
    _inside,
    _Strict,
    as_written,
    check_table_name,
    non_negative_duration,
    positive_duration,
)

FieldType = Literal["string", "long", "int", "float", "double", "boolean", "timestamp"]
#: what the writer does with a line's fields the configuration does not know (see ``StreamConfig.unknown_fields``)
UnknownFields = Literal["ignore", "keep", "reject"]
#: the events table's catch-all column of ``unknown_fields: keep``
EXTRA_COLUMN = "_extra"
CommitPath = Literal["auto", "internal", "public"]
#: the shortest ``writer_lease`` accepted (the writer's loop renews the lease about once a second)
MIN_WRITER_LEASE = timedelta(seconds=5)


class FieldSpec(_Strict):
    """One field of a stream's JSON record."""

    type: FieldType
    required: bool = False
    #: the values a string field may hold (any other is rejected: "field 'x' is 'v': not one of ..."); none: any
    values: list[str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _values(self) -> FieldSpec:
        if self.values is not None and self.type != "string":
            raise ValueError(f"values: only a string field has a list of values (this one is a {self.type})")
        return self


class StreamConfig(_Strict):
    """One event stream: where it lands, what it looks like, where it goes."""

    name: str
    landing_path: Path
    checkpoint_path: Path
    table: str
    rejects_table: str
    writer_id: str
    event_time_field: str
    event_id_field: str
    fields: dict[str, FieldSpec]
    partition_period: Literal["hour"] = "hour"
    trigger_interval: timedelta = timedelta(seconds=10)
    allowed_lateness: timedelta = timedelta(minutes=10)
    idle_window: timedelta = timedelta(minutes=5)
    #: the source sends events continuously: an input idle (no file landed, no commit) for ``idle_window`` after an
    #: hour's end + lateness is a gap (alert). False for a stream that replays history: an idle input, all of it
    #: committed, has ended, and the hours its watermark reached close
    live: bool = True
    max_files_per_trigger: int = Field(default=100, ge=1)
    #: event times earlier than this, or later than the data file's landing time + max_future, are rejected
    min_event_time: str = "2000-01-01T00:00:00+00:00"
    max_future: timedelta = timedelta(days=1)
    #: how far ahead of the writer's clock an event time may be and still count for the stream's watermark:
    #: events further ahead are kept, their producer is named (writer log, commit summary, partition status), and
    #: the watermark goes no further than the writer's clock + this (one fast producer clock cannot close hours)
    max_clock_skew: timedelta = timedelta(minutes=5)
    #: the window of landing files the writer's file source remembers, by modification time behind the newest file
    #: (Spark's maxFileAge): it bounds the writer's memory. A file landing with an older modification time (cp -p,
    #: rsync -t), within source_log_retention, is still ingested: the writer sets its modification time to now (see
    #: laketide.ingest.late_files)
    max_file_age: timedelta = timedelta(days=7)
    #: how long the file source's log in the checkpoint keeps a read file's entry, by modification time behind the
    #: newest file (Spark keeps every entry for ever): it bounds the log. A file landing with a modification time
    #: older than this is not ingested automatically but named (see laketide.ingest.late_files). At least
    #: max_file_age
    source_log_retention: timedelta = timedelta(days=60)
    #: once an hour closes, move its landing files (data file and audit record, both ingested and verified) from
    #: ``data/`` and ``audit/`` into ``archive/<hour>/``: what the writer lists at each trigger stays the size of the
    #: hours still open, whatever the stream's age. Verification, reconcile, backfill and redo read the archive too
    #: (see laketide.close.archive); false: every landing file stays where its producer put it
    archive_closed_hours: bool = True
    #: a writer silent (no heartbeat) for this long loses the stream to a new writer (see laketide.lake.lease)
    writer_lease: timedelta = timedelta(seconds=60)
    #: a landing line longer than this (in bytes, without its newline) is rejected unparsed
    max_line_bytes: int = Field(default=4 * 1024 * 1024, ge=1, le=2**31 - 1)
    #: accept timestamp values that are a date alone ("2026-11-22", read as midnight UTC)
    allow_date_only_timestamps: bool = False
    #: accept timestamp values with a time but no UTC offset ("2026-11-22T03:00:00", read as UTC)
    allow_timestamps_without_offset: bool = False
    #: the writer application that runs this stream: streams of one group share one Spark application (one JVM, one
    #: Airflow task, ``laketide_ingest_<group>``), each with its own checkpoint, tables, markers and lease, and a
    #: stream that fails stops alone. Default: the stream's own name (an application of its own)
    group: str | None = None
    #: alert (the ``close.alert_callback`` notifier, and an ERROR in the writer's log) when the landed -> committed
    #: latency's p95 over the last hour passes this (none: no latency alert)
    alert_latency: timedelta | None = None
    #: alert when more landed files than this wait for the writer (none: no backlog alert)
    alert_backlog_files: int | None = Field(default=None, ge=1)
    #: how the writer commits: "internal" (fast, non-public Spark/Iceberg APIs, see laketide.lake.internals),
    #: "public" (public APIs only), or "auto": internal when its start-up check passes, else public
    commit_path: CommitPath = "auto"
    #: the writer drops a valid event whose id its hour already holds (in the table, or earlier in the same batch),
    #: counting it per hour in the commit's summary (``laketide.duplicates-dropped``); see laketide.ingest.dedupe
    dedupe_on_write: bool = False
    #: a line's fields that ``fields`` does not name: "ignore" them (the line is ingested without them), "keep" them
    #: in the events table's catch-all column ``_extra`` (a map from field name to the value's text), or "reject"
    #: the line (reason: the unknown fields, named). keep and reject read each line's keys: a second JSON pass
    unknown_fields: UnknownFields = "ignore"
    #: what consumers outside Airflow get when an hour of the stream closes or re-closes: a marker file, an HTTP
    #: POST, a callable (see laketide.close.markers); none by default
    done_markers: DoneMarkersConfig | None = None
    #: keyed, changing data: each change is kept in ``table`` (the change log) and merged into ``upsert.table``, one
    #: row per key (see laketide.config.upsert); none: an append stream
    upsert: UpsertConfig | None = None

    @field_validator("trigger_interval", "idle_window", "max_future", "max_clock_skew", "max_file_age",
                     "source_log_retention", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @field_validator("alert_latency", mode="before")
    @classmethod
    def _alert_latency(cls, value: Any) -> timedelta | None:
        return None if value is None else positive_duration(value)

    @field_validator("writer_lease", mode="before")
    @classmethod
    def _lease(cls, value: Any) -> timedelta:
        lease = positive_duration(value)
        if lease < MIN_WRITER_LEASE:
            raise ValueError(
                f"{as_written(lease)} is too short: the writer renews its lease about once a second and a batch "
                f"commit, a GC pause or a busy catalog easily takes longer; use at least "
                f"{as_written(MIN_WRITER_LEASE)} (the default, 60s, suits most streams)")
        return lease

    @field_validator("allowed_lateness", mode="before")
    @classmethod
    def _lateness(cls, value: Any) -> timedelta:
        return non_negative_duration(value)

    @field_validator("landing_path", "checkpoint_path")
    @classmethod
    def _path(cls, value: Path) -> Path:
        return _absolute(value)

    @field_validator("min_event_time")
    @classmethod
    def _min_event_time(cls, value: str) -> str:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO timestamp like 2000-01-01T00:00:00+00:00") from None
        if parsed.tzinfo is None:
            raise ValueError(f"{value!r} has no UTC offset: write e.g. 2000-01-01T00:00:00+00:00")
        return value

    @field_validator("name", "writer_id", "group")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(f"{value!r} may only hold letters, digits, '_', '.', '-'")
        return value

    @field_validator("table", "rejects_table")
    @classmethod
    def _table(cls, value: str) -> str:
        return check_table_name(value)

    @field_validator("fields")
    @classmethod
    def _fields(cls, value: dict[str, FieldSpec]) -> dict[str, FieldSpec]:
        for name in value:
            if not _IDENT.fullmatch(name):
                raise ValueError(f"field name {name!r} is not a plain identifier")
            if name.startswith("_"):
                raise ValueError(f"field name {name!r} starts with '_', which laketide keeps for its own columns "
                                 "(_source_file, _batch_id, ...): rename the field")
        return value

    @model_validator(mode="after")
    def _key_fields(self) -> StreamConfig:
        for key in ("event_time_field", "event_id_field"):
            name = getattr(self, key)
            if name not in self.fields:
                raise ValueError(f"{key}: {name!r} is not one of fields {sorted(self.fields)}")
            if not self.fields[name].required:
                raise ValueError(f"{key}: field {name!r} must be declared required: true")
        if self.fields[self.event_time_field].type != "timestamp":
            raise ValueError(f"event_time_field: field {self.event_time_field!r} must have type timestamp")
        if self.event_time_field == self.event_id_field:
            raise ValueError("event_id_field: must be another field than event_time_field")
        if self.max_clock_skew > self.max_future:
            raise ValueError(
                f"max_clock_skew: {as_written(self.max_clock_skew)} is longer than max_future "
                f"({as_written(self.max_future)}): "
                "events beyond max_future are rejected anyway; keep max_clock_skew to a few minutes")
        if self.max_file_age < timedelta(hours=1):
            raise ValueError(f"max_file_age: {as_written(self.max_file_age)} is shorter than an hour: use e.g. '7d'")
        if self.source_log_retention < self.max_file_age:
            raise ValueError(
                f"source_log_retention: {as_written(self.source_log_retention)} is shorter than max_file_age "
                f"({as_written(self.max_file_age)}): the file source must find in its log every file it still "
                "remembers; "
                "use e.g. '60d'")
        if self.table == self.rejects_table:
            raise ValueError(f"rejects_table: {self.table!r} is also the events table; name another table")
        if self.idle_window <= self.trigger_interval:
            raise ValueError(
                f"idle_window: {as_written(self.idle_window)} is not longer than trigger_interval "
                f"({as_written(self.trigger_interval)}); "
                "the writer commits at most once per trigger, so every hour would look stalled (a gap): "
                "use several trigger intervals")
        if self.upsert is not None:
            check_upsert(self.upsert, self.fields, self.table, self.rejects_table, self.event_id_field,
                         self.event_time_field)
            if self.dedupe_on_write:
                raise ValueError("dedupe_on_write: an upsert stream's merge keeps one row per key already; a change "
                                 "arriving twice changes nothing: set dedupe_on_write: false")
        if _inside(self.checkpoint_path, self.landing_path) or _inside(self.landing_path, self.checkpoint_path):
            raise ValueError(
                f"checkpoint_path: {str(self.checkpoint_path)!r} overlaps landing_path {str(self.landing_path)!r}; "
                "keep the checkpoint outside the landing zone (e.g. {home}/checkpoints/<stream>)")
        return self

    def allowed_values(self, name: str) -> tuple[str, ...] | None:
        """The values field ``name`` may hold (its ``values``; an upsert stream's operation field: the operations),
        None when any value is accepted."""
        spec = self.fields[name]
        if spec.values is not None:
            return tuple(spec.values)
        if self.upsert is not None and name == self.upsert.operation_field:
            return UPSERT_OPERATIONS + DELETE_OPERATIONS
        return None

    @property
    def namespace(self) -> str:
        return self.table.split(".")[0]

    @property
    def writer_group(self) -> str:
        """The writer application this stream runs in (``group``, else its own name)."""
        return self.group or self.name
