"""Shared helpers: throwaway laketide homes, real writer processes, real kills."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import yaml

from laketide.config import REPO_ROOT, LaketideConfig, load_config

JARS_DIR = REPO_ROOT / ".laketide" / "jars"
#: the Spark JVM options of the test suite's configurations (set by tests/conftest.py, see tests/jvm.py)
JAVA_OPTIONS_ENV = "LAKETIDE_TEST_JAVA_OPTIONS"
WRITER = REPO_ROOT / "spark_jobs" / "ingest_stream.py"

STREAM_FIELDS = {
    "event_id": {"type": "string", "required": True},
    "event_time": {"type": "timestamp", "required": True},
    "user_id": {"type": "long", "required": True},
    "page": {"type": "string", "required": True},
    "action": {"type": "string"},
    "duration_ms": {"type": "long"},
    "country": {"type": "string"},
}

#: an upsert stream of account changes (tests/test_upsert.py, bench/bench_upsert.py): the change log's fields, and
#: the ``upsert`` section merging them into ``lake.accounts``
ACCOUNT_FIELDS = {
    "change_id": {"type": "string", "required": True},
    "changed_at": {"type": "timestamp", "required": True},
    "account_id": {"type": "string", "required": True},
    "version": {"type": "long", "required": True},
    "op": {"type": "string", "required": True},
    "balance": {"type": "long"},
    "status": {"type": "string"},
}
#: the tests' changes carry fixed change times (days before the day the suite runs): a retention far longer than
#: that, so that no change is refused as older than a delete's tombstone could be (tests of the rule set their own)
ACCOUNT_UPSERT = {"table": "lake.accounts", "primary_key": ["account_id"], "sequence_field": "version",
                  "operation_field": "op", "tombstone_retention": "3650d"}


def write_config(home: Path, catalog_name: str = "laketide", java_options: str | None = None,
                 **stream_overrides: Any) -> Path:
    """A laketide configuration in ``home`` (SQLite catalog, local warehouse, one stream 'clicks').

    ``catalog_name``: the Spark/Iceberg catalog name. A module that adds its own catalog to the test process's one
    SparkSession needs a name of its own: Spark keeps a catalog it has loaded under its name.
    ``java_options``: the Spark JVMs' options (default: the suite's, ``$LAKETIDE_TEST_JAVA_OPTIONS``, see
    ``tests/jvm.py``)."""
    stream = {
        "name": "clicks",
        "landing_path": "{home}/landing/clicks",
        "checkpoint_path": "{home}/checkpoints/clicks",
        "table": "lake.clicks",
        "rejects_table": "lake.clicks_rejects",
        "writer_id": "clicks-writer",
        "event_time_field": "event_time",
        "event_id_field": "event_id",
        "trigger_interval": "2s",
        "allowed_lateness": "10m",
        "idle_window": "5m",
        "max_files_per_trigger": 4,
        "fields": STREAM_FIELDS,
    }
    stream.update(stream_overrides)
    java = os.environ.get(JAVA_OPTIONS_ENV, "") if java_options is None else java_options
    raw = {
        "home": str(home),
        "catalog": {"name": catalog_name, "uri": "sqlite:///{home}/catalog.db", "warehouse": "file://{home}/warehouse"},
        "spark": {
            "master": "local[2]",
            "jars_dir": str(JARS_DIR),
            "conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                     **({"spark.driver.extraJavaOptions": java} if java else {})},
        },
        "streams": [stream],
    }
    home.mkdir(parents=True, exist_ok=True)
    path = home / "laketide.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def config_env(config_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKETIDE")}
    env.update({"LAKETIDE_CONFIG": str(config_path), "TZ": "UTC"}, **extra)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def load(config_path: Path) -> LaketideConfig:
    return load_config(config_path, environ={})


def start_writer(config_path: Path, mode: str = "incremental", log: Path | None = None, group: str | None = None,
                 **env: str) -> subprocess.Popen[bytes]:
    """Start the real writer process in its own process group (so a kill takes the JVM too): stream 'clicks', or
    the writer application of ``group``."""
    out = open(log or (config_path.parent / "writer.log"), "ab")  # noqa: SIM115 - closed with the process
    which = ["--group", group] if group else ["--stream", "clicks"]
    return subprocess.Popen(
        [sys.executable, str(WRITER), *which, "--mode", mode],
        env=config_env(config_path, **env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )


def write_group_config(home: Path, names: list[str], group: str = "g", **overrides: Any) -> Path:
    """A configuration whose streams ``names`` (each with its own landing zone, checkpoint, tables and writer id)
    form the writer group ``group``; ``overrides`` apply to every stream."""
    path = write_config(home, **overrides)
    raw = yaml.safe_load(path.read_text())
    template = raw["streams"][0]
    raw["streams"] = [{**template, "name": n, "group": group, "landing_path": f"{{home}}/landing/{n}",
                       "checkpoint_path": f"{{home}}/checkpoints/{n}", "table": f"lake.{n}",
                       "rejects_table": f"lake.{n}_rejects", "writer_id": f"{n}-writer"} for n in names]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_writer(config_path: Path, mode: str = "incremental", timeout: float = 300, group: str | None = None,
               **env: str) -> int:
    proc = start_writer(config_path, mode, None, group, **env)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise


def unique_catalog(prefix: str) -> str:
    """A catalog name no other configuration of this test process uses (see :func:`ingest`)."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


#: the catalogs the test process's SparkSession has been pointed at: name -> the catalog database's URI
SESSION_CATALOGS: dict[str, str] = {}


def ingest(spark: Any, config_path: Path, group: str | None = None) -> None:
    """Ingest what has landed with the real writer application (``laketide.ingest.group.run_group``, incremental
    mode, the code ``spark_jobs/ingest_stream.py`` runs), here on the test process's SparkSession (the ``spark``
    fixture) instead of in a writer process: stream 'clicks', or the streams of ``group``. Its log goes to the
    home's ``writer.log``, as a writer process's does. A stream's error is raised (a process would exit with its
    code).

    For tests that need rows ingested by the writer. What is about the writer process itself (a SIGKILL, a SIGSTOP,
    two processes at once, exit codes, the JVM's memory) starts the process (:func:`start_writer`,
    :func:`run_writer`). The configuration needs a catalog name of its own (:func:`unique_catalog`): Spark keeps
    the catalog of a name it has served, so a name must keep meaning one catalog database in this process."""
    from laketide.ingest.group import run_group

    config = load(config_path)
    bind_catalog(spark, config)
    streams = config.group(group) if group else [config.stream("clicks")]
    with logged_to(config_path.parent / "writer.log"):
        run_group(config, streams, "incremental", spark)


@contextlib.contextmanager
def logged_to(path: Path) -> Iterator[TextIO]:
    """laketide's log lines (INFO and up, each naming its stream) appended to ``path`` inside the block, as a job's
    process writes its log; yields the open file (for the job's own output)."""
    import logging

    from laketide.logs import FORMAT, name_streams

    logger = logging.getLogger("laketide")
    level = logger.level
    with path.open("a") as out:
        handler = name_streams(logging.StreamHandler(out))
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            yield out
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)


def bind_catalog(spark: Any, config: LaketideConfig) -> None:
    """Point the test process's SparkSession at ``config``'s catalog (see :func:`ingest`)."""
    from laketide.lake.spark import use_catalog

    name, uri = config.catalog.name, config.catalog.uri
    bound = SESSION_CATALOGS.setdefault(name, uri)
    if bound != uri:
        raise AssertionError(f"catalog name {name!r} already serves {bound} in this test process's SparkSession: "
                             "give the configuration a name of its own: write_config(catalog_name=unique_catalog(...))")
    use_catalog(spark, config)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the writer and everything it started (JVM, Python workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def freeze(proc: subprocess.Popen[bytes], config_path: Path) -> None:
    """SIGSTOP the writer's process group at a moment it holds no write transaction on a SQLite catalog.

    A process frozen inside a write transaction keeps SQLite's one write lock for as long as it is frozen: every
    other process waits (``database is locked``), nobody can take its lease, and no software fix exists short of
    killing it (PostgreSQL locks rows, not the database). That is SQLite's nature, not the frozen-writer case
    the fencing tests are about, so such a moment is let go (SIGCONT) and the freeze tried again."""
    import sqlite3

    uri = load_config(config_path).catalog.uri
    for _ in range(50):
        os.killpg(proc.pid, signal.SIGSTOP)
        if not uri.startswith("sqlite"):
            return
        conn = sqlite3.connect(uri.removeprefix("sqlite:///"), timeout=0.5, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            conn.close()
    raise AssertionError("the writer kept SQLite's write lock at every freeze: it never left its transaction")


def wait_lease_silent(config_path: Path, timeout: float = 60) -> None:
    """Wait until the lease of every stream of the configuration has had no heartbeat for longer than the stream's
    ``writer_lease``, as the takeover rule of ``laketide.lake.lease`` counts it: from then on a second writer takes
    it over (a frozen holder stays silent). Instead of a fixed sleep past the lease. A free lease counts as silent."""
    from laketide.lake.lease import WriterLease, engine_for

    config = load(config_path)
    engine = engine_for(config.catalog)
    leases = [WriterLease(engine, s.writer_id, s.writer_lease, "test") for s in config.streams]
    deadline = time.monotonic() + timeout
    try:
        while True:
            now = time.time()
            holders = [(lease, lease.holder()) for lease in leases]
            if all(h is None or now - h.heartbeat_at > lease.ttl for lease, h in holders):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"a lease still had heartbeats after {timeout}s: {[h for _, h in holders]}")
            time.sleep(0.2)
    finally:
        engine.dispose()


def wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    """Wait until ``path`` exists; fail early if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return
        if proc.poll() is not None:
            raise AssertionError(f"writer exited with {proc.returncode} before reaching {path.name}")
        time.sleep(0.2)
    kill_group(proc)
    raise AssertionError(f"timed out waiting for {path}")


def wait_for_log(config_path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    """Wait until the writer's log holds ``text``; fail early if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in writer_log(config_path):
            return
        if proc.poll() is not None:
            raise AssertionError(f"writer exited with {proc.returncode} before logging {text!r}")
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {text!r} in the writer log")


def exit_code(proc: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> int:
    """The writer's exit code; a writer still running after ``timeout`` is killed and its log's end shown."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise AssertionError(f"the writer still ran after {timeout:.0f}s:\n"
                             + log.read_text(errors="replace")[-4000:]) from None


def writer_log(config_path: Path) -> str:
    path = config_path.parent / "writer.log"
    return path.read_text(errors="replace") if path.exists() else ""
