from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from laketide.config import REPO_ROOT

# Airflow reads its configuration when first imported: point it at a throwaway home before any test does.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="laketide-airflow-"))
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
os.environ.update({
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
    # laketide's plugin: the lakehouse view and the replayed streams' close timetable (which DAGs serialize with)
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
    # a key of the length HS512 wants (Airflow generates a short one), so that the token signing is quiet
    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
    "TZ": "UTC",
})
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
# py4j logs at interpreter exit, after pytest closed its streams
logging.getLogger("py4j").setLevel(logging.WARNING)

from laketide.lake.jars import provision  # noqa: E402
from tests.helpers import JARS_DIR, JAVA_OPTIONS_ENV  # noqa: E402

#: the modules that take longest, longest first (measured: the durations ``make test`` prints, summed per module).
#: Collected first, so that two workers (``-n 2 --dist loadfile``: a module runs whole on one worker, its tests in
#: order) start the long ones early and finish together; the others follow in file order. This order is the queue
#: only with ``--no-loadscope-reorder`` (in ``addopts``): by default pytest-xdist re-sorts the modules by their
#: number of tests, which put a single two-minute test (the busy catalog) and the production profile last.
SLOWEST_FIRST = (
    "test_maintain", "test_fencing", "test_faults", "test_redo", "test_upsert", "test_group", "test_production",
    "test_contention", "test_lineage",
    "test_checkpoint_damage", "test_held_out", "test_upsert_postgres", "test_history", "test_consistent_view",
    "test_writer",
    "test_poison_line", "test_backfill", "test_run_script", "test_parse", "test_docs_commands", "test_dags",
    "test_schema", "test_debezium", "test_bom",
    "test_dedupe", "test_close_dag", "test_big_hour", "test_ui_browser", "test_writer_stops", "test_snapshots",
    "test_cli", "test_repair",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: a module's tests keep their order


def pytest_sessionstart(session: pytest.Session) -> None:
    """Every Spark JVM of the suite starts with the options of ``tests/jvm.py``. Their class-data-sharing archive is
    built once per machine and class path, by ``make test-jvm`` before the tests (``make test`` runs it), or here
    when it is missing (each test worker waits for the one that builds it)."""
    from tests.jvm import ensure_archive, java_options

    if JAVA_OPTIONS_ENV not in os.environ:
        provision(JARS_DIR)
        ensure_archive(JARS_DIR)
        os.environ[JAVA_OPTIONS_ENV] = java_options(JARS_DIR)


@pytest.fixture(scope="session")
def jars() -> Path:
    """The real jars, provisioned once (idempotent)."""
    provision(JARS_DIR)
    return JARS_DIR


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A real Airflow metadata database (SQLite) in the throwaway Airflow home."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def spark(jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One local SparkSession for in-process tests (and writers: ``tests.helpers.ingest``), wired to a throwaway
    SQLite catalog."""
    from laketide.ingest.group import WRITER_SETTINGS
    from laketide.lake.spark import build_session
    from tests.helpers import SESSION_CATALOGS, load, write_config

    home = tmp_path_factory.mktemp("spark-home")
    config = load(write_config(home))
    # the writer application's settings: tests run the writer on this session too (tests.helpers.ingest)
    session = build_session(config, "laketide-tests", master="local[2]", extra=WRITER_SETTINGS)
    SESSION_CATALOGS[config.catalog.name] = config.catalog.uri
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def lake(spark: object, tmp_path_factory: pytest.TempPathFactory) -> object:
    """Four hours (one quiet) landed by the real producer and ingested by the real writer (see tests/lake.py)."""
    from tests.lake import build_lake

    return build_lake(tmp_path_factory.mktemp("lake"), spark)
