"""The ``catalog``, ``spark`` and ``close`` sections, and what one Spark application may take of a cluster."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from laketide.config.values import _IDENT, _Strict, as_written, check_table_name, parse_size, positive_duration


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


#: a JVM memory size as Spark reads it (no unit: MiB)
_JVM_MEMORY = re.compile(r"^(\d+)(b|k|kb|m|mb|g|gb|t|tb)?$")
_MIB = {"b": 1 / 2**20, "k": 1 / 1024, "kb": 1 / 1024, "m": 1, "mb": 1, "g": 1024, "gb": 1024, "t": 2**20, "tb": 2**20}
#: Spark refuses a driver or an executor with less (300 MiB reserved x 1.5)
MIN_JVM_MIB = 450

#: the kinds of Spark application laketide submits: the writer applications (one per writer group), the
#: maintenance application, and the manual actions' jobs (redo, backfill, repair)
ApplicationKind = Literal["writer", "maintenance", "actions"]


class ResourcesConfig(_Strict):
    """What one Spark application may take of a cluster. Only the keys given replace the defaults of its kind."""

    #: total cores of the application on a standalone cluster (``spark.cores.max``): without a cap the first
    #: application takes every core of the cluster and the next ones wait
    cores: int | None = Field(default=None, ge=1)
    #: cores per executor (``spark.executor.cores``); unset: one executor per worker with the cores it may take
    executor_cores: int | None = Field(default=None, ge=1)
    #: heap of each executor (``spark.executor.memory``), e.g. ``1g``, ``512m``
    executor_memory: str | None = None
    #: heap of the driver (``spark.driver.memory``): the driver runs where the Airflow task runs
    driver_memory: str | None = None
    #: any other Spark setting of the application (e.g. ``spark.executor.instances`` on YARN or Kubernetes)
    conf: dict[str, str] = {}

    @field_validator("executor_memory", "driver_memory")
    @classmethod
    def _memory(cls, value: str | None) -> str | None:
        if value is None:
            return None
        text = str(value).strip().lower()
        match = _JVM_MEMORY.fullmatch(text)
        if not match:
            raise ValueError(f"{value!r} is not a JVM memory size: use e.g. '512m', '1g', '4g'")
        if int(match.group(1)) * _MIB[match.group(2) or "m"] < MIN_JVM_MIB:
            raise ValueError(f"{value!r} is below {MIN_JVM_MIB}m: Spark refuses a driver or executor with less")
        return text

    @model_validator(mode="after")
    def _executor_fits(self) -> ResourcesConfig:
        problem = self.problem()
        if problem:
            raise ValueError(problem)
        return self

    def problem(self) -> str | None:
        """Why an application with these limits could not start, if it could not."""
        if self.cores is not None and self.executor_cores is not None and self.executor_cores > self.cores:
            return (f"executor_cores: {self.executor_cores} is more than cores ({self.cores}): no executor of the "
                    "application could start")
        return None

    def over(self, base: ResourcesConfig) -> ResourcesConfig:
        """``base`` with the keys given here (``conf`` merged key by key); the configuration's checks look at the
        combination (:meth:`problem`)."""
        given = {name: getattr(self, name) for name in self.model_fields_set if name != "conf"}
        return base.model_copy(update={**given, "conf": {**base.conf, **self.conf}})

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings of these limits."""
        conf = {key: str(value) for key, value in (
            ("spark.cores.max", self.cores), ("spark.executor.cores", self.executor_cores),
            ("spark.executor.memory", self.executor_memory), ("spark.driver.memory", self.driver_memory),
        ) if value is not None}
        return {**conf, **self.conf}


#: what each kind of application takes when the configuration says nothing: 2 cores and 1 GiB executors each, so
#: that one writer application, the maintenance application and a manual action fit a 6-core worker together
DEFAULT_RESOURCES: dict[str, ResourcesConfig] = {
    kind: ResourcesConfig(cores=2, executor_memory="1g") for kind in ("writer", "maintenance", "actions")
}


class SparkConfig(_Strict):
    """How Spark jobs are built: master, jars, the executors' Python, per-application limits and extra conf."""

    master: str = "local[2]"
    #: where the provisioned jars live (see ``python -m laketide.lake.jars``)
    jars_dir: Path
    #: Maven coordinates; when set they replace the local jars (spark.jars.packages)
    packages: list[str] = []
    #: the Python interpreter the executors start (``spark.pyspark.python``); default: the one that submits the
    #: job. It must exist at this path on every Spark worker, with the same PySpark
    python: str | None = None
    #: per kind of application (``writer``, ``maintenance``, ``actions``): what it may take of a cluster; a writer
    #: group's own ``writer_groups.<group>.resources`` goes over ``writer``
    resources: dict[ApplicationKind, ResourcesConfig] = {}
    conf: dict[str, str] = {}

    @field_validator("python")
    @classmethod
    def _python(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r}: give the absolute path of the interpreter on the Spark workers")
        return value

    def application(self, kind: ApplicationKind, override: ResourcesConfig | None = None) -> ResourcesConfig:
        """The limits of an application of ``kind``: the defaults, the configuration's, then ``override``."""
        limits = self.resources[kind].over(DEFAULT_RESOURCES[kind]) if kind in self.resources else \
            DEFAULT_RESOURCES[kind]
        return override.over(limits) if override is not None else limits


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
            raise ValueError(f"sensor_timeout: {as_written(self.sensor_timeout)} is not longer than poke_interval "
                             f"({as_written(self.poke_interval)}); the sensor would give up before its second check")
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
    """A writer application (a group of streams): what it exposes and what it may take of a cluster."""

    #: serve the group's writer figures as Prometheus metrics on this port (``/metrics``); 0: no endpoint
    metrics_port: int = Field(default=0, ge=0, le=65535)
    #: this application's limits, over ``spark.resources.writer`` (only the keys given)
    resources: ResourcesConfig = ResourcesConfig()
