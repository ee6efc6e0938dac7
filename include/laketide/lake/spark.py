"""The one place that builds Spark settings and the SparkSession: catalog, jars, extensions."""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from laketide.config import REPO_ROOT, ApplicationKind, LaketideConfig, ResourcesConfig
from laketide.config.values import _local_path
from laketide.errors import ConfigError, DeployModeError
from laketide.lake.catalog import jdbc_properties
from laketide.lake.jars import jar_set

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
LOG4J = REPO_ROOT / "conf" / "log4j2.properties"
SPARK_JOBS = REPO_ROOT / "spark_jobs"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
ARROW = "spark.sql.execution.arrow.pyspark.enabled"
TIME_PARSER_POLICY = "spark.sql.legacy.timeParserPolicy"
ANSI = "spark.sql.ansi.enabled"
#: the kind of application each job of ``spark_jobs/`` is: its limits come from ``spark.resources.<kind>`` (and, for
#: a writer application, ``writer_groups.<group>.resources``)
JOB_KINDS: dict[str, ApplicationKind] = {
    "ingest_stream": "writer", "maintain": "maintenance", "redo": "actions", "backfill": "actions", "repair": "actions",
}


def spark_conf(config: LaketideConfig) -> dict[str, str]:
    """Spark configuration for every laketide job; also passed to ``spark-submit --conf``."""
    name = config.catalog.name
    prefix = f"spark.sql.catalog.{name}"
    conf = {
        "spark.sql.extensions": EXTENSIONS,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.warehouse": config.catalog.warehouse,
        f"{prefix}.cache-enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    }
    for key, value in jdbc_properties(config.catalog).items():
        conf[f"{prefix}.{key}"] = value
    if config.spark.packages:
        conf["spark.jars.packages"] = ",".join(config.spark.packages)
    else:
        conf["spark.jars"] = ",".join(str(p) for p in jar_set(config.spark.jars_dir).all)
    conf.update(config.spark.conf)
    # laketide's own: a timestamp value that Spark's pre-3.0 parser would take and the strict pattern refuses is
    # invalid (the line is rejected), never an error that fails the whole batch (SparkUpgradeException)
    conf[TIME_PARSER_POLICY] = "CORRECTED"
    # and the checks read a value that does not parse as null (a rejected line): under ANSI mode the same parse, cast
    # or lookup raises (CANNOT_PARSE_TIMESTAMP, CAST_INVALID_INPUT), and every attempt of the batch holding the line
    # fails. laketide's jobs run laketide's own expressions, so the SQL dialect is laketide's to choose
    conf[ANSI] = "false"
    # JVM options of the configuration come after laketide's logging setup, not instead of it
    given = config.spark.conf.get(JAVA_OPTIONS)
    conf[JAVA_OPTIONS] = f"-Dlog4j2.configurationFile=file:{LOG4J}" + (f" {given}" if given else "")
    return conf


def build_session(config: LaketideConfig, app_name: str, master: str | None = None,
                  extra: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession wired to the shared Iceberg catalog; ``extra``: more settings (the configuration's win)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master or not _submitted():
        builder = builder.master(master or config.spark.master)
    for key, value in {**(extra or {}), **spark_conf(config)}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def local_frame(spark: SparkSession, rows: Sequence[Sequence[object]], schema: str) -> DataFrame:
    """A small DataFrame of ``rows`` the driver holds (``schema``: Spark DDL, the columns in the rows' order), handed
    to the JVM as Arrow record batches: the JVM builds the rows itself and no Python worker starts. Turns on the
    session's Arrow conversions (``spark.sql.execution.arrow.pyspark.enabled``, which ``toPandas`` uses too).

    ``spark.createDataFrame`` of a Python list has Python workers unpickle the rows, again at each action on the
    DataFrame, and under Python 3.11 each of their tasks re-reads the directory of every zip and jar on the workers'
    path (``importlib.invalidate_caches``): about half a CPU-second per DataFrame against a fifth through Arrow on two
    cores (measured on 200 rows, DataFrame built and counted)."""
    import pandas as pd
    from pyspark.sql import functions as F

    struct = spark.createDataFrame([], schema).schema  # the DDL parsed; no job runs
    if not rows:  # (PySpark sends an empty pandas frame through Python workers)
        return spark.range(0).select(*(F.lit(None).cast(f.dataType).alias(f.name) for f in struct.fields))
    spark.conf.set(ARROW, "true")
    return spark.createDataFrame(pd.DataFrame([tuple(row) for row in rows], columns=struct.names), struct)


def use_catalog(spark: SparkSession, config: LaketideConfig) -> None:
    """Point a running session at ``config``'s catalog (its ``spark.sql.catalog.<name>*`` settings): tests and
    benchmarks share one session across several catalogs. Spark keeps a catalog it has loaded under its name, so
    each catalog a session is pointed at needs a name of its own."""
    prefix = f"spark.sql.catalog.{config.catalog.name}"
    for key, value in spark_conf(config).items():
        if key.startswith(prefix):
            spark.conf.set(key, value)


def _submitted() -> bool:
    """True inside spark-submit, where the master comes from the command line."""
    import os

    return "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_SUBMIT_OPTS" in os.environ


def job_resources(config: LaketideConfig, job: str, args: Sequence[str]) -> ResourcesConfig:
    """What the application of ``job`` (a file of ``spark_jobs/``) with ``args`` may take of a cluster: a writer
    application's group comes from ``--group`` (or the group of ``--stream``)."""
    kind = JOB_KINDS.get(Path(job).stem, "actions")
    group = _writer_group(config, list(args)) if kind == "writer" else None
    return config.application_resources(kind, group)


def _writer_group(config: LaketideConfig, args: list[str]) -> str | None:
    for flag in ("--group", "--stream"):
        value = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == flag), None)
        value = value or next((a.split("=", 1)[1] for a in args if a.startswith(flag + "=")), None)
        if value is None:
            continue
        if flag == "--group":
            return value
        try:
            return config.stream(value).writer_group
        except ConfigError:  # the job refuses it with its own message (exit 2)
            return None
    return None


def submit_conf(config: LaketideConfig, job: str, args: Sequence[str]) -> dict[str, str]:
    """Every Spark setting of a submitted job: the catalog, jars and logging (:func:`spark_conf`), the Python of the
    driver (this one) and of the executors (``spark.python``, default this one), UTC on the executors, and the
    limits of the job's application (:func:`job_resources`: ``spark.cores.max``, executor and driver memory)."""
    conf = {
        "spark.pyspark.python": config.spark.python or sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.TZ": "UTC",
        **spark_conf(config),
    }
    conf.update(job_resources(config, job, args).spark_conf())
    return conf


def check_deploy_mode(master: str, deploy_mode: str | None, where: str) -> None:
    """Refuse a deploy mode laketide's jobs cannot run in, naming what to change (``where``: the setting's place,
    e.g. "connection 'spark_default'").

    :raises DeployModeError: for ``cluster`` (or anything but ``client``)
    """
    mode = (deploy_mode or "client").strip().lower()
    if mode == "client":
        return
    if mode != "cluster":
        raise DeployModeError(f"{where}: deploy mode {deploy_mode!r} is not a Spark deploy mode; laketide's jobs run "
                              "in client mode: remove \"deploy-mode\" from the connection's extra")
    why = ("and Spark's standalone master runs no Python application in cluster mode at all"
           if master.startswith("spark://") else
           "and in cluster mode the driver would start on a cluster node that has neither")
    raise DeployModeError(
        f"{where} asks for deploy mode 'cluster' (master {master}): laketide's Spark jobs run in client mode only. "
        "The driver runs where the Airflow task runs: it reads the laketide configuration and state folder there, "
        f"holds the stream's writer lease and hands its exit code to the task, {why}. Remove \"deploy-mode\" from "
        "the connection's extra (or set it to \"client\"): the executors still run on the cluster")


def is_local(master: str) -> bool:
    """``local``, ``local[4]``, ``local[*]``: one JVM, no cluster."""
    return master.strip().lower().startswith("local")


def executor_paths(config: LaketideConfig) -> list[str]:
    """The local paths a job's executors read or write: the warehouse (a local one) and every landing zone. On a
    cluster each must be the same storage at the same path on every Spark worker and on the host of the driver."""
    paths = []
    warehouse = _local_path(config.catalog.warehouse)
    if warehouse is not None:
        paths.append(f"warehouse {warehouse}")
    paths += [f"landing zone of stream {s.name} {s.landing_path}" for s in config.streams]
    return paths


def package_zip(config: LaketideConfig) -> Path:
    """Zip the ``laketide`` package for ``--py-files`` so a job runs on any cluster manager.

    Each module is in it twice: its source, and its bytecode compiled by this Python (an unchecked-hash ``.pyc``
    beside it, which Python's zip importer prefers). A Python importing from a zip never writes bytecode, so
    without it every job's driver and Python worker would compile each module from source, twice (the zip
    importer compiles once to find a module, once to load it). A Python of another version skips the bytecode
    (its magic number differs) and compiles the source, as before."""
    import laketide

    source = Path(laketide.__file__).parent
    target = config.home / "dist" / "laketide.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".zip.{os.getpid()}.tmp")  # jobs submitted at once (one state folder) do not collide
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(source.rglob("*.py")):
            name = Path("laketide") / path.relative_to(source)
            archive.write(path, name)
            archive.writestr(str(name.with_suffix(".pyc")), _bytecode(path, target / name))
    tmp.replace(target)
    return target


def _bytecode(path: Path, shown: Path) -> bytes:
    """The ``.pyc`` of the source file ``path`` for this Python, valid whatever the file's time in a zip (PEP 552's
    unchecked hash); tracebacks name the module ``shown`` (its path in the zip, as the zip importer names it)."""
    import importlib.util
    import marshal

    data = path.read_bytes()
    code = compile(data, str(shown), "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")  # hash-based, source not checked
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(data) + marshal.dumps(code)


def submit_command(config: LaketideConfig, job: str, args: list[str], master: str | None = None) -> list[str]:
    """The ``spark-submit`` command of a laketide job (a file in ``spark_jobs/``) with everything it needs:
    the master, the catalog and Iceberg settings with the jars (or Maven packages), quiet logging, the Python,
    the application's limits (:func:`submit_conf`), and the ``laketide`` package as ``--py-files``. The same
    settings the Airflow operator passes."""
    path = SPARK_JOBS / job
    if not path.is_file():
        jobs = sorted(p.name for p in SPARK_JOBS.glob("*.py"))
        raise FileNotFoundError(f"no Spark job {job!r} in {SPARK_JOBS}: jobs are {jobs}")
    conf = submit_conf(config, job, args)
    command = ["spark-submit", "--master", master or config.spark.master, "--name", f"laketide-{path.stem}"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "--py-files", str(package_zip(config)), str(path), *args]
