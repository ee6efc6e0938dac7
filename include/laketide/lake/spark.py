"""The one place that builds Spark settings and the SparkSession: catalog, jars, extensions."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from laketide.config import REPO_ROOT, LaketideConfig
from laketide.lake.catalog import jdbc_properties
from laketide.lake.jars import jar_set

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
LOG4J = REPO_ROOT / "conf" / "log4j2.properties"
SPARK_JOBS = REPO_ROOT / "spark_jobs"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"


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


def package_zip(config: LaketideConfig) -> Path:
    """Zip the ``laketide`` package for ``--py-files`` so a job runs on any cluster manager."""
    import laketide

    source = Path(laketide.__file__).parent
    target = config.home / "dist" / "laketide.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(source.rglob("*.py")):
            archive.write(path, Path("laketide") / path.relative_to(source))
    tmp.replace(target)
    return target


def submit_command(config: LaketideConfig, job: str, args: list[str], master: str | None = None) -> list[str]:
    """The ``spark-submit`` command of a laketide job (a file in ``spark_jobs/``) with everything it needs:
    the master, the catalog and Iceberg settings with the jars (or Maven packages), quiet logging, this
    Python, and the ``laketide`` package as ``--py-files``. The same settings the Airflow operator passes."""
    path = SPARK_JOBS / job
    if not path.is_file():
        jobs = sorted(p.name for p in SPARK_JOBS.glob("*.py"))
        raise FileNotFoundError(f"no Spark job {job!r} in {SPARK_JOBS}: jobs are {jobs}")
    conf = {**spark_conf(config), "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable}
    command = ["spark-submit", "--master", master or config.spark.master, "--name", f"laketide-{path.stem}"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "--py-files", str(package_zip(config)), str(path), *args]
