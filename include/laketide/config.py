"""One typed configuration for laketide: a YAML file plus environment overrides.

Where the file is: ``$LAKETIDE_CONFIG``, else ``conf/laketide.yaml`` at the repository root.
Where local state lives: ``$LAKETIDE_HOME``, else the file's ``home`` key, else ``.laketide`` at the
repository root. ``{home}`` inside any string value is replaced by that folder.

Environment overrides use ``LAKETIDE__`` plus the key path joined by double underscores, e.g.
``LAKETIDE__CATALOG__URI=postgresql+psycopg2://u:p@db:5432/lake`` or
``LAKETIDE__STREAMS__CLICKS__TRIGGER_INTERVAL=10s`` (streams are addressed by name).
A wrong or missing setting raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import math
import os
import re
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from laketide.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "conf" / "laketide.yaml"
ENV_PREFIX = "LAKETIDE__"

FieldType = Literal["string", "long", "int", "double", "boolean", "timestamp"]
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_UNITS = {
    "": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
}


def parse_duration(value: Any) -> timedelta:
    """Parse ``30s``, ``10 minutes``, ``1h``, ``2d`` or a number of seconds into a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value).lower())
        if not match or match.group(2) not in _UNITS:
            raise ValueError(f"not a duration: {value!r} (use e.g. '30s', '10 minutes', '1h')")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"not a duration: {value!r} (use e.g. '30s', '10 minutes', '1h')")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {value!r} is out of range (at most {timedelta.max.days} days)") from None


def positive_duration(value: Any) -> timedelta:
    """A duration above zero (a negative or zero interval, window or timeout is refused)."""
    duration = parse_duration(value)
    if duration <= timedelta(0):
        raise ValueError(f"must be a positive duration, not {value!r} (use e.g. '30s', '10 minutes', '1h')")
    return duration


def non_negative_duration(value: Any) -> timedelta:
    """A duration of zero or more."""
    duration = parse_duration(value)
    if duration < timedelta(0):
        raise ValueError(f"must not be negative: {value!r} (use 0 for none, or e.g. '10m')")
    return duration


def _secs(value: timedelta) -> str:
    return f"{value.total_seconds():g}s"


def _absolute(value: Path) -> Path:
    if not value.is_absolute():
        raise ValueError(f"{str(value)!r} is a relative path: the Spark jobs and Airflow workers run from other "
                         "folders; use an absolute path or '{home}/...'")
    return value


def _local_path(location: str) -> Path | None:
    """The local folder of a warehouse location (``file://...`` or a plain path), None for remote storage."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") and not parsed.netloc:
        path = Path(unquote(parsed.path))
        return path if path.is_absolute() else None
    return None


def _inside(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or lies under it (symbolic links resolved as far as they exist)."""
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def check_table_name(value: str) -> str:
    """``namespace.table`` with plain identifiers (they reach SQL: nothing else is accepted)."""
    parts = value.split(".")
    if len(parts) != 2 or not all(_IDENT.match(p) for p in parts):
        raise ValueError(f"{value!r} must be 'namespace.table' with plain identifiers")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldSpec(_Strict):
    """One field of a stream's JSON record."""

    type: FieldType
    required: bool = False


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
    trigger_interval: timedelta = timedelta(seconds=30)
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
    #: a writer silent (no heartbeat) for this long loses the stream to a new writer (see laketide.lake.lease)
    writer_lease: timedelta = timedelta(seconds=60)
    #: a landing line longer than this (in bytes, without its newline) is rejected unparsed
    max_line_bytes: int = Field(default=4 * 1024 * 1024, ge=1, le=2**31 - 1)
    #: accept timestamp values that are a date alone ("2026-11-22", read as midnight UTC)
    allow_date_only_timestamps: bool = False
    #: accept timestamp values with a time but no UTC offset ("2026-11-22T03:00:00", read as UTC)
    allow_timestamps_without_offset: bool = False
    #: the writer drops a valid event whose id its hour already holds (in the table, or earlier in the same batch),
    #: counting it per hour in the commit's summary (``laketide.duplicates-dropped``); see laketide.ingest.dedupe
    dedupe_on_write: bool = False

    @field_validator("trigger_interval", "idle_window", "max_future", "writer_lease", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

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

    @field_validator("name", "writer_id")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
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
            if not _IDENT.match(name):
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
        if self.table == self.rejects_table:
            raise ValueError(f"rejects_table: {self.table!r} is also the events table; name another table")
        if self.idle_window <= self.trigger_interval:
            raise ValueError(
                f"idle_window: {_secs(self.idle_window)} is not longer than trigger_interval "
                f"({_secs(self.trigger_interval)}); "
                "the writer commits at most once per trigger, so every hour would look stalled (a gap): "
                "use several trigger intervals")
        if _inside(self.checkpoint_path, self.landing_path) or _inside(self.landing_path, self.checkpoint_path):
            raise ValueError(
                f"checkpoint_path: {str(self.checkpoint_path)!r} overlaps landing_path {str(self.landing_path)!r}; "
                "keep the checkpoint outside the landing zone (e.g. {home}/checkpoints/<stream>)")
        return self

    @property
    def namespace(self) -> str:
        return self.table.split(".")[0]


class CatalogConfig(_Strict):
    """The Iceberg catalog shared by Spark (JDBC catalog) and Airflow (pyiceberg SqlCatalog)."""

    name: str = "laketide"
    #: SQLAlchemy URI: sqlite:////abs/path/catalog.db or postgresql+psycopg2://user:pw@host:port/db
    uri: str
    warehouse: str
    #: how long a writer or status commit waits out a busy or unreachable catalog before it gives up
    retry_timeout: timedelta = timedelta(minutes=10)

    @field_validator("retry_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _IDENT.match(value):
            raise ValueError(f"{value!r} is not a plain identifier")
        return value

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        if not value.startswith(("sqlite:///", "postgresql")):
            raise ValueError(f"{value!r}: use sqlite:////abs/path.db or postgresql+psycopg2://user:pw@host/db")
        return value


class SparkConfig(_Strict):
    """How Spark jobs are built: master, jars and extra conf."""

    master: str = "local[2]"
    #: where the provisioned jars live (see ``python -m laketide.lake.jars``)
    jars_dir: Path
    #: Maven coordinates; when set they replace the local jars (spark.jars.packages)
    packages: list[str] = []
    conf: dict[str, str] = {}


class CloseConfig(_Strict):
    """How partitions are closed: the status table, verification results, alerts and sensor timing."""

    #: Iceberg table (namespace.table) holding every partition's state, counts and verification result
    status_table: str = "laketide.partition_status"
    #: where Great Expectations validation results are kept, one JSON file per check
    results_dir: Path
    #: ``module:function`` called with the Airflow context when a close fails (gap, failed verification)
    alert_callback: str | None = None
    #: how often the partition-completion trigger re-reads the table metadata
    poke_interval: timedelta = timedelta(seconds=60)
    #: how long the sensor waits for a partition before it fails (lagging or open for too long)
    sensor_timeout: timedelta = timedelta(hours=6)
    #: the most hours one "close range" run of the close DAG may cover (longer ranges: several runs, or a backfill)
    max_range_hours: int = Field(default=744, ge=1)

    @field_validator("poke_interval", "sensor_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @model_validator(mode="after")
    def _timing(self) -> CloseConfig:
        if self.sensor_timeout <= self.poke_interval:
            raise ValueError(f"sensor_timeout: {_secs(self.sensor_timeout)} is not longer than poke_interval "
                             f"({_secs(self.poke_interval)}); the sensor would give up before its second check")
        return self

    @field_validator("status_table")
    @classmethod
    def _table(cls, value: str) -> str:
        return check_table_name(value)

    @field_validator("alert_callback")
    @classmethod
    def _callback(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            raise ValueError(f"{value!r} must be 'package.module:function'")
        return value


_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$")
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
               "g": 1024**3, "gb": 1024**3, "gib": 1024**3}
#: remove_orphan_files refuses an age below this (Iceberg #4194: a short age deleted files of commits in flight;
#: Iceberg's Spark procedure refuses less than 24 hours too). There is no override: a test ages its files instead.
ORPHAN_AGE_FLOOR = timedelta(days=1)
MAINTENANCE_ACTIONS = ("rewrite_data_files", "rewrite_manifests", "expire_snapshots", "remove_orphan_files")


def parse_size(value: Any) -> int:
    """``134217728``, ``128MB``, ``512k`` or ``1g`` as bytes (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(str(value).lower())
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. '128MB', '512KB' or a number of bytes)")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2) or ""]


class TablePolicy(_Strict):
    """What maintenance does to one table (``maintenance.defaults``, overridden per table)."""

    #: actions run by default (a manual run may pick others): any of MAINTENANCE_ACTIONS
    actions: list[str] = list(MAINTENANCE_ACTIONS)
    #: rewrite_data_files: binpack closed hours to files of this size
    target_file_size: int = 128 * 1024**2
    #: rewrite_data_files: a closed hour is compacted when it has at least this many data files
    min_input_files: int = Field(default=2, ge=2)
    #: expire_snapshots: snapshots older than this are expired (the writer's newest marker is always kept)
    snapshot_retention: timedelta = timedelta(days=1)
    #: expire_snapshots: at least this many snapshots of the current lineage are kept, whatever their age
    min_snapshots: int = Field(default=50, ge=1)
    #: remove_orphan_files: only files older than this are candidates (at least 1 day, see ORPHAN_AGE_FLOOR)
    orphan_age: timedelta = timedelta(days=3)
    #: threshold run: rewrite_manifests as soon as the current snapshot has more manifests than this
    max_manifests: int = Field(default=100, ge=2)
    #: threshold run: expire_snapshots as soon as the table keeps more snapshots than this
    max_snapshots: int = Field(default=5000, ge=2)

    @field_validator("target_file_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        size = parse_size(value)
        if size < 1024 * 1024:
            raise ValueError(f"{value!r} is below 1MB: compaction would make more files, not fewer")
        return size

    @field_validator("snapshot_retention", "orphan_age", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @field_validator("actions")
    @classmethod
    def _actions(cls, value: list[str]) -> list[str]:
        unknown = [a for a in value if a not in MAINTENANCE_ACTIONS]
        if unknown:
            raise ValueError(f"unknown action(s) {unknown}: use any of {list(MAINTENANCE_ACTIONS)}")
        return value

    @model_validator(mode="after")
    def _orphan_floor(self) -> TablePolicy:
        if self.orphan_age < ORPHAN_AGE_FLOOR:
            raise ValueError(
                f"orphan_age: {_secs(self.orphan_age)} is below the safe floor of 1 day: files of a batch or "
                "compaction still in flight would be deleted (Iceberg #4194); use 3d (the default) or more")
        return self


class MaintenanceConfig(_Strict):
    """Table maintenance out of the write path (``laketide.maintain``): policies, record, schedule."""

    #: Iceberg table (namespace.table) where every maintenance action records what it did
    record_table: str = "laketide.maintenance_log"
    #: the policy of every maintained table (events, rejects, status and this record table)
    defaults: TablePolicy = TablePolicy()
    #: per-table overrides of ``defaults`` (keys: namespace.table), e.g. {"lake.clicks": {"min_snapshots": 100}}
    tables: dict[str, TablePolicy] = {}
    #: cron (UTC) of the daily run of expire_snapshots and remove_orphan_files over every table
    daily_schedule: str = "30 3 * * *"
    #: cron (UTC) of the threshold check: tables past max_manifests or max_snapshots are maintained at once
    threshold_schedule: str = "45 * * * *"
    #: a maintenance run holds a lease per table; a silent holder loses it after this long
    lease: timedelta = timedelta(hours=2)

    @model_validator(mode="before")
    @classmethod
    def _merge(cls, raw: Any) -> Any:
        """Each table's override is read on top of the defaults (only the keys it names change)."""
        if isinstance(raw, dict) and isinstance(raw.get("tables"), dict):
            defaults = raw.get("defaults") or {}
            if isinstance(defaults, TablePolicy):
                defaults = defaults.model_dump()
            raw = {**raw, "tables": {name: {**defaults, **policy} if isinstance(policy, dict) else policy
                                     for name, policy in raw["tables"].items()}}
        return raw

    @field_validator("record_table")
    @classmethod
    def _table(cls, value: str) -> str:
        return check_table_name(value)

    @field_validator("tables")
    @classmethod
    def _tables(cls, value: dict[str, TablePolicy]) -> dict[str, TablePolicy]:
        for name in value:
            check_table_name(name)
        return value

    @field_validator("lease", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @field_validator("daily_schedule", "threshold_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError(f"{value!r} is not a 5-field cron expression like '30 3 * * *'")
        return value

    def policy(self, table: str) -> TablePolicy:
        """The policy of ``table``: its override, else the defaults."""
        return self.tables.get(table, self.defaults)


class LaketideConfig(_Strict):
    home: Path
    catalog: CatalogConfig
    spark: SparkConfig
    close: CloseConfig
    streams: list[StreamConfig]
    maintenance: MaintenanceConfig = MaintenanceConfig()

    @model_validator(mode="after")
    def _unique(self) -> LaketideConfig:
        problems = _shared_keys(self) + _overlapping_paths(self) + _maintained(self)
        if problems:
            # each problem starts with the key it is about: the message lists them all
            raise ValueError("\n".join(problems))
        return self

    def stream(self, name: str) -> StreamConfig:
        for stream in self.streams:
            if stream.name == name:
                return stream
        raise ConfigError(f"unknown stream {name!r}: configured streams are {[s.name for s in self.streams]}")


def maintained_tables(config: LaketideConfig) -> list[str]:
    """Every table maintenance looks after: each stream's events and rejects, the status and the record table."""
    tables = [t for s in config.streams for t in (s.table, s.rejects_table)]
    return [*tables, config.close.status_table, config.maintenance.record_table]


def _maintained(config: LaketideConfig) -> list[str]:
    problems: list[str] = []
    record_table = config.maintenance.record_table
    if record_table in maintained_tables(config)[:-1]:
        problems.append(f"maintenance.record_table: {record_table!r} is already a stream's or the status table; "
                        "use a table of its own (default laketide.maintenance_log)")
    known = maintained_tables(config)
    for name in config.maintenance.tables:
        if name not in known:
            problems.append(f"maintenance.tables: {name!r} is not a maintained table; use one of {known}")
    for stream in config.streams:
        # the partition check counts an hour's rows from the writer's snapshot summaries: an hour must be closed
        # before expiry removes the commits that added its rows
        need = config.close.sensor_timeout + stream.allowed_lateness + timedelta(hours=1)
        retention = config.maintenance.policy(stream.table).snapshot_retention
        if retention < need:
            key = "tables" if stream.table in config.maintenance.tables else "defaults"
            problems.append(
                f"maintenance.{key}.snapshot_retention: {_secs(retention)} for {stream.table} is shorter than an hour "
                f"of stream {stream.name!r} may wait to close ({_secs(need)}: 1 hour + allowed_lateness + "
                "close.sensor_timeout); the partition check reads the rows of an hour from the writer's snapshots, "
                "which expiry would remove first. Keep 1d (the default) or more")
    return problems


def _key(stream: StreamConfig, field: str) -> str:
    return f"streams[{stream.name}].{field}"


def _shared_keys(config: LaketideConfig) -> list[str]:
    """Names, writer ids and tables that two streams (or a stream and the status table) share."""
    problems: list[str] = []
    owners: dict[tuple[str, str], str] = {}
    for i, stream in enumerate(config.streams):
        if stream.name in [s.name for s in config.streams[:i]]:
            problems.append(f"streams[{i}].name: stream name {stream.name!r} is used twice; give each stream its own")
            continue
        claims = [("writer_id", stream.writer_id), ("table", stream.table), ("rejects_table", stream.rejects_table)]
        for field, value in claims:
            kind = "writer id" if field == "writer_id" else "table"
            owner = owners.get((kind, value))
            if owner is not None:
                what = ("the dedupe key: two streams with one writer id would skip each other's batches"
                        if kind == "writer id" else "each stream needs its own tables")
                problems.append(f"{_key(stream, field)}: {value!r} is already {owner}; {what}")
            else:
                owners[(kind, value)] = f"the {field} of stream {stream.name!r}"
    status = config.close.status_table
    if ("table", status) in owners:
        problems.append(f"close.status_table: {status!r} is {owners[('table', status)]}; "
                        "use a table of its own (default laketide.partition_status)")
    return problems


def _overlapping_paths(config: LaketideConfig) -> list[str]:
    """Landing zones, checkpoints, the warehouse and the results folder must not lie inside one another."""
    problems: list[str] = []
    warehouse = _local_path(config.catalog.warehouse)
    for i, stream in enumerate(config.streams):
        landing, checkpoint = stream.landing_path, stream.checkpoint_path
        if warehouse is not None:
            if _inside(landing, warehouse) or _inside(warehouse, landing):
                problems.append(f"{_key(stream, 'landing_path')}: {str(landing)!r} overlaps the warehouse "
                                f"{config.catalog.warehouse!r}: the writer would read table files as landed events; "
                                "keep the landing zone apart (e.g. {home}/landing/<stream>)")
            if _inside(checkpoint, warehouse) or _inside(warehouse, checkpoint):
                problems.append(f"{_key(stream, 'checkpoint_path')}: {str(checkpoint)!r} is inside the warehouse "
                                f"{config.catalog.warehouse!r} (the table location): remove_orphan_files would delete "
                                "it (Iceberg #7334); keep it apart (e.g. {home}/checkpoints/<stream>)")
        for other in config.streams[:i]:
            if _inside(landing, other.landing_path) or _inside(other.landing_path, landing):
                problems.append(f"{_key(stream, 'landing_path')}: {str(landing)!r} overlaps the landing zone of "
                                f"stream {other.name!r} ({str(other.landing_path)!r}): give each stream its own folder")
            if _inside(checkpoint, other.checkpoint_path) or _inside(other.checkpoint_path, checkpoint):
                problems.append(f"{_key(stream, 'checkpoint_path')}: {str(checkpoint)!r} overlaps the checkpoint of "
                                f"stream {other.name!r} ({str(other.checkpoint_path)!r}): give each stream its own")
        for other in config.streams:
            if other is stream:
                continue
            if _inside(checkpoint, other.landing_path) or _inside(other.landing_path, checkpoint):
                problems.append(f"{_key(stream, 'checkpoint_path')}: {str(checkpoint)!r} overlaps the landing zone "
                                f"of stream {other.name!r} ({str(other.landing_path)!r}): keep checkpoints apart")
        results = config.close.results_dir
        if _inside(results, landing) or _inside(results, checkpoint):
            problems.append(f"close.results_dir: {str(results)!r} is inside the landing zone or the checkpoint of "
                            f"stream {stream.name!r}: keep it apart (default {{home}}/gx)")
    if warehouse is not None and _inside(config.close.results_dir, warehouse):
        problems.append(f"close.results_dir: {str(config.close.results_dir)!r} is inside the warehouse "
                        f"{config.catalog.warehouse!r}: remove_orphan_files would delete it; keep it apart")
    return problems


def _expand(value: Any, home: str) -> Any:
    if isinstance(value, str):
        return value.replace("{home}", home)
    if isinstance(value, dict):
        return {k: _expand(v, home) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, home) for v in value]
    return value


def _apply_env(raw: dict[str, Any], environ: dict[str, str]) -> None:
    for key, value in sorted(environ.items()):
        if not key.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in key[len(ENV_PREFIX):].split("__")]
        node: Any = raw
        for i, part in enumerate(path[:-1]):
            if isinstance(node, list):  # streams are addressed by name
                match = [s for s in node if isinstance(s, dict) and str(s.get("name", "")).lower() == part]
                if not match:
                    raise ConfigError(f"{key}: no stream named {part!r} in the configuration")
                node = match[0]
            else:
                if not isinstance(node, dict):
                    raise ConfigError(f"{key}: {'.'.join(path[:i])} is not a section")
                node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {'.'.join(path[:-1])} is not a section")
        node[path[-1]] = yaml.safe_load(value) if value else value


_FIELD_FIRST = re.compile(r"^([a-z_]+(?:\[[^\]]*\])?(?:\.[a-z_]+)*): ")


def _location(loc: tuple[int | str, ...], raw: dict[str, Any]) -> str:
    """``streams.0.trigger_interval`` as ``streams[clicks].trigger_interval`` (streams by name, as in overrides)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int) and i == 1 and loc[0] == "streams":
            streams = raw.get("streams")
            item = streams[part] if isinstance(streams, list) and part < len(streams) else None
            name = item.get("name") if isinstance(item, dict) else None
            parts[-1] += f"[{name}]" if isinstance(name, str) and name else f"[{part}]"
        else:
            parts.append(str(part))
    return ".".join(parts)


def _format_errors(exc: ValidationError, source: str, raw: dict[str, Any] | None = None) -> str:
    lines = [f"invalid laketide configuration ({source}):"]
    for err in exc.errors():
        loc = _location(tuple(err["loc"]), raw or {})
        msg = err["msg"].removeprefix("Value error, ")
        # a check across keys of a section (the section's own validator) begins each line with the key it is about
        whole_section = err["type"] == "value_error" and (len(err["loc"]) <= 1 or isinstance(err["loc"][-1], int))
        for line in msg.split("\n"):
            key = loc
            if whole_section and (field := _FIELD_FIRST.match(line)):
                key, line = ".".join(p for p in (loc, field.group(1)) if p), line[field.end():]
            lines.append(f"  - {key or '<root>'}: {line}")
    return "\n".join(lines)


def config_path(environ: dict[str, str] | None = None) -> Path:
    """The configuration file in force: ``$LAKETIDE_CONFIG`` or ``conf/laketide.yaml``."""
    env = os.environ if environ is None else environ
    return Path(env.get("LAKETIDE_CONFIG") or DEFAULT_CONFIG).resolve()


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> LaketideConfig:
    """Read, expand, override and validate the configuration; raise ConfigError naming the bad key."""
    env = dict(os.environ if environ is None else environ)
    cfg_path = Path(path) if path else config_path(env)
    if not cfg_path.is_file():
        raise ConfigError(f"configuration file not found: {cfg_path} (set LAKETIDE_CONFIG to its path)")
    try:
        raw = yaml.safe_load(cfg_path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{cfg_path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{cfg_path}: top level must be a mapping")
    _apply_env(raw, env)
    home = Path(env.get("LAKETIDE_HOME") or raw.get("home") or ".laketide")
    if not home.is_absolute():
        home = (REPO_ROOT / home).resolve()
    raw["home"] = str(home)
    raw = _expand(raw, str(home))
    raw.setdefault("spark", {}).setdefault("jars_dir", str(home / "jars"))
    if raw.get("close") is None:
        raw["close"] = {}
    if isinstance(raw["close"], dict):
        raw["close"].setdefault("results_dir", str(home / "gx"))
    try:
        return LaketideConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, str(cfg_path), raw)) from None


@lru_cache(maxsize=4)
def _cached(path: str | None, env_items: tuple[tuple[str, str], ...]) -> LaketideConfig:
    return load_config(path, dict(env_items))


def get_config(path: str | Path | None = None) -> LaketideConfig:
    """Cached :func:`load_config` keyed on the path and the relevant environment."""
    relevant = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("LAKETIDE")))
    return _cached(str(path) if path else None, relevant)
