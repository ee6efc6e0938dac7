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

import os
import re
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

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
        return timedelta(seconds=float(value))
    match = _DURATION.match(str(value).lower())
    if not match or match.group(2) not in _UNITS:
        raise ValueError(f"not a duration: {value!r} (use e.g. '30s', '10 minutes', '1h')")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


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
    max_files_per_trigger: int = Field(default=100, ge=1)
    #: event times earlier than this, or later than the data file's landing time + max_future, are rejected
    min_event_time: str = "2000-01-01T00:00:00+00:00"
    max_future: timedelta = timedelta(days=1)
    #: a landing line longer than this (in bytes, without its newline) is rejected unparsed
    max_line_bytes: int = Field(default=4 * 1024 * 1024, ge=1, le=2**31 - 1)
    #: accept timestamp values that are a date alone ("2026-11-22", read as midnight UTC)
    allow_date_only_timestamps: bool = False
    #: accept timestamp values with a time but no UTC offset ("2026-11-22T03:00:00", read as UTC)
    allow_timestamps_without_offset: bool = False

    @field_validator("trigger_interval", "allowed_lateness", "idle_window", "max_future", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return parse_duration(value)

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
                raise ValueError(f"{key} {name!r} is not one of fields {sorted(self.fields)}")
            if not self.fields[name].required:
                raise ValueError(f"{key} {name!r} must be declared required: true")
        if self.fields[self.event_time_field].type != "timestamp":
            raise ValueError(f"event_time_field {self.event_time_field!r} must have type timestamp")
        if self.table == self.rejects_table:
            raise ValueError("table and rejects_table must differ")
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
    #: where the provisioned jars live (see ``python -m laketide.jars``)
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

    @field_validator("poke_interval", "sensor_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return parse_duration(value)

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


class LaketideConfig(_Strict):
    home: Path
    catalog: CatalogConfig
    spark: SparkConfig
    close: CloseConfig
    streams: list[StreamConfig]

    @model_validator(mode="after")
    def _unique(self) -> LaketideConfig:
        names = [s.name for s in self.streams]
        if len(set(names)) != len(names):
            raise ValueError(f"stream names must be unique: {names}")
        tables = [t for s in self.streams for t in (s.table, s.rejects_table)]
        if len(set(tables)) != len(tables):
            raise ValueError(f"each stream needs its own tables: {tables}")
        return self

    def stream(self, name: str) -> StreamConfig:
        for stream in self.streams:
            if stream.name == name:
                return stream
        raise ConfigError(f"unknown stream {name!r}: configured streams are {[s.name for s in self.streams]}")


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


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"invalid laketide configuration ({source}):"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        lines.append(f"  - {loc or '<root>'}: {err['msg']}")
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
        raise ConfigError(_format_errors(exc, str(cfg_path))) from None


@lru_cache(maxsize=4)
def _cached(path: str | None, env_items: tuple[tuple[str, str], ...]) -> LaketideConfig:
    return load_config(path, dict(env_items))


def get_config(path: str | Path | None = None) -> LaketideConfig:
    """Cached :func:`load_config` keyed on the path and the relevant environment."""
    relevant = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("LAKETIDE")))
    return _cached(str(path) if path else None, relevant)
