"""The ``catalog``, ``spark`` and ``close`` sections."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from laketide.config.values import _IDENT, _secs, _Strict, check_table_name, parse_size, positive_duration


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
        if not _IDENT.fullmatch(value):
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
    #: Iceberg table (namespace.table) recording every manual action (redo, backfill, repair), dry runs included
    action_table: str = "laketide.action_log"
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
    #: each close run ends by setting its Airflow run note (the hours it closed and the outcome), through Airflow's
    #: REST API: the Airflow connection of this id gives the API's address and a user (see docs/operations.md).
    #: Without it, or when the API refuses, the note is only logged; nothing fails
    run_notes: bool = True
    api_conn_id: str = "laketide_airflow_api"
    #: the memory verification and reconciliation give their on-disk engine (DuckDB) to count duplicate event ids;
    #: beyond it DuckDB spills to a temporary folder (about 20 bytes of disk per row of the hour)
    scan_memory: int = 256 * 1024**2

    @field_validator("scan_memory", mode="before")
    @classmethod
    def _scan_memory(cls, value: Any) -> int:
        size = parse_size(value)
        if size < 64 * 1024**2:
            raise ValueError(f"{value!r} is below 64MB: DuckDB needs at least that much to work (use e.g. '1GB')")
        return size

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

    @field_validator("status_table", "action_table")
    @classmethod
    def _table(cls, value: str) -> str:
        return check_table_name(value)

    @field_validator("alert_callback")
    @classmethod
    def _callback(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            raise ValueError(f"{value!r} must be 'package.module:function'")
        return value


class WriterGroupConfig(_Strict):
    """A writer application (a group of streams): what it exposes."""

    #: serve the group's writer figures as Prometheus metrics on this port (``/metrics``); 0: no endpoint
    metrics_port: int = Field(default=0, ge=0, le=65535)
