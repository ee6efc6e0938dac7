"""The production profile on loopback: one throwaway PostgreSQL holding Airflow's metadata database and the Iceberg
catalog (two databases), a Spark standalone master and worker (from the pip PySpark), ``spark_default`` pointing at
the master in client mode, and the real DAGs run with ``dag.test()`` in processes of their own on that database.

The tests of this module share the cluster and the lake and run in order:

1. the ingest DAG's one-off run of stream ``a`` goes to the cluster, capped at its configured cores; counts exact;
2. two continuous writer applications (groups ``g1``, ``g2``) run on the cluster; the close DAG closes an hour of
   ``a`` and the maintenance DAG's application runs beside both writers: all three hold executors at once, each
   with the one core its configuration gives it;
3. PostgreSQL stops under both writers while files land, and starts again: the writers wait it out, counts exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from laketide.config import REPO_ROOT
from laketide.lake.spark import submit_command
from tests.dag_run import run_in_process
from tests.helpers import config_env, kill_group, load, write_group_config
from tests.pg import PgCluster, _free_port
from tests.test_writer import assert_exactly_once, produce

pytestmark = pytest.mark.slow

START = "2026-11-22T01:00:00+00:00"
HOUR_1 = datetime.fromisoformat(START)
WORKER_CORES = 3  # two writer applications and the maintenance application, one core each


@dataclass
class Profile:
    home: Path
    config_path: Path
    pg: PgCluster
    master: str
    master_ui: str
    airflow_env: dict[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    writers: dict[str, tuple[subprocess.Popen[bytes], Path]] = field(default_factory=dict)


def _start(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def cluster_state(ui: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{ui}/json/", timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def wait(condition: Any, what: str, timeout: float = 180, logs: tuple[Path, ...] = ()) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception as exc:  # the condition's own failure: retried until the deadline, then reported
            last = exc
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists())
    raise AssertionError(f"{what}: not within {timeout}s (last error: {last!r})\n{tails}")


def _configure(home: Path, catalog_uri: str) -> Path:
    path = write_group_config(home, ["a", "b"], group="g1", trigger_interval="1s", max_files_per_trigger=4)
    raw = yaml.safe_load(path.read_text())
    raw["streams"][1]["group"] = "g2"
    raw["catalog"]["uri"] = catalog_uri
    limits = {"cores": 1, "executor_memory": "512m", "driver_memory": "512m"}
    raw["spark"]["resources"] = {"writer": limits, "maintenance": limits, "actions": limits}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def profile(jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Profile]:
    home = tmp_path_factory.mktemp("production")
    pg = PgCluster()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        pg.start()
        airflow_db = pg.createdb("airflow")
        config_path = _configure(home, pg.createdb("catalog"))
        port, ui_port = _free_port(), _free_port()
        master, ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
        airflow_env = config_env(
            config_path,
            AIRFLOW_HOME=str(home / "airflow"),
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow_db,
            AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": port,
                                                   "extra": {"deploy-mode": "client"}}),
            LAKETIDE__CLOSE__POKE_INTERVAL="1s",
            LAKETIDE__CLOSE__SENSOR_TIMEOUT="90s",
        )
        # Airflow's schema on PostgreSQL (asyncpg is imported by the migration) while the Spark cluster starts
        migrate = subprocess.Popen([sys.executable, "-m", "airflow", "db", "migrate"], env=airflow_env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        spark_env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(home / "spark-work")}
        procs.append(_start(["spark-class", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", str(port), "--webui-port", str(ui_port)], home / "master.log", spark_env))
        procs.append(_start(["spark-class", "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
                             "--cores", str(WORKER_CORES), "--memory", "2g", "--webui-port", str(_free_port())],
                            home / "worker.log", spark_env))
        out, _ = migrate.communicate(timeout=300)
        assert migrate.returncode == 0, out.decode(errors="replace")[-5000:]
        wait(lambda: [w["state"] for w in cluster_state(ui)["workers"]] == ["ALIVE"], "the Spark worker registers",
             logs=(home / "master.log", home / "worker.log"))
        yield Profile(home, config_path, pg, master, ui, airflow_env, procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_group(proc)
        pg.destroy()


def run_dag(profile: Profile, dag_file: str, dag_id: str, **kwargs: Any) -> dict[str, Any]:
    """``dag.test()`` in a process of its own, on the profile's Airflow database and Spark connection."""
    started = time.monotonic()
    result, output = run_in_process(REPO_ROOT / "dags" / dag_file, dag_id, profile.airflow_env, REPO_ROOT, **kwargs)
    result["output"] = output
    print(f"{dag_id}: {result['state']} in {time.monotonic() - started:.0f}s")  # the cost, with pytest -s
    return result


def apps(profile: Profile, which: str = "activeapps") -> list[dict[str, Any]]:
    return list(cluster_state(profile.master_ui)[which])


def test_ingest_dag_runs_on_the_cluster_with_airflow_and_the_catalog_on_postgres(profile: Profile) -> None:
    produce(profile.config_path, "--stream", "a", "--start", START, "--hours", "1", "--events-per-hour", "300",
            "--events-per-file", "100", "--malformed-ratio", "0.03", "--seed", "7")
    result = run_dag(profile, "laketide_ingest.py", "laketide_ingest_a_once")
    assert result["state"] == "success", result["output"][-6000:]
    assert f"Spark master {profile.master}: the executors read and write" in result["output"]
    lake = assert_exactly_once(profile.config_path, "a")
    assert sum(lake.values()) > 280
    # the one-off run is the application of the stream's writer group
    (done,) = [a for a in apps(profile, "completedapps") if a["name"] == "laketide-ingest-g1"]
    assert done["state"] == "FINISHED" and done["memoryperexecutor"] == 512


def start_writer_application(profile: Profile, group: str) -> None:
    config = load(profile.config_path)
    log = profile.home / f"writer-{group}.log"
    command = submit_command(config, "ingest_stream.py", ["--group", group, "--mode", "continuous"],
                             master=profile.master)
    proc = _start(command, log, config_env(profile.config_path))
    profile.processes.append(proc)
    profile.writers[group] = (proc, log)


def test_two_writers_close_and_maintenance_share_the_cluster(profile: Profile) -> None:
    # stream a's next hour (its watermark passes the end of hour 1 + lateness) and stream b's first two hours
    produce(profile.config_path, "--stream", "a", "--start", "2026-11-22T02:00:00+00:00", "--hours", "1",
            "--events-per-hour", "200", "--events-per-file", "100", "--seed", "9")
    produce(profile.config_path, "--stream", "b", "--start", START, "--hours", "2", "--events-per-hour", "200",
            "--events-per-file", "100", "--malformed-ratio", "0.03", "--seed", "7")
    for group in ("g1", "g2"):
        start_writer_application(profile, group)
    logs = tuple(log for _, log in profile.writers.values())

    def writers_running() -> bool:
        running = sorted((a["name"], a["cores"]) for a in apps(profile) if a["state"] == "RUNNING")
        return running == [("laketide-ingest-g1", 1), ("laketide-ingest-g2", 1)]

    wait(writers_running, "both writer applications hold one core each", logs=logs)
    for stream in ("a", "b"):
        wait(lambda s=stream: assert_exactly_once(profile.config_path, s) is not None,  # type: ignore[misc]
             f"the writer application of stream {stream} ingests what landed", logs=logs)

    closed = run_dag(profile, "laketide_close.py", "laketide_close_a", logical_date=HOUR_1.replace(hour=2))
    assert closed["state"] == "success", closed["output"][-6000:]
    from laketide.close.partitions import State
    from laketide.close.status import history

    config = load(profile.config_path)
    assert history(config, "a", HOUR_1)[-1].state == State.CLOSED

    seen: list[list[tuple[str, str, int]]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                seen.append([(a["name"], a["state"], a["cores"]) for a in apps(profile)])
            time.sleep(0.3)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        maintained = run_dag(profile, "laketide_maintain.py", "laketide_maintain",
                             run_conf={"table": "lake.a", "actions": ["default"], "dry_run": False})
    finally:
        stop.set()
        watcher.join()
    assert maintained["state"] == "success", maintained["output"][-6000:]
    # the maintenance application got its core beside both writers: nobody waited for cores
    together = [s for s in seen if len([a for a in s if a[1] == "RUNNING" and a[2] == 1]) == 3]
    assert together, seen[-20:]
    assert {a[0] for a in together[0]} == {"laketide-ingest-g1", "laketide-ingest-g2", "laketide-maintain"}
    assert all(cores <= 1 for snapshot in seen for _, _, cores in snapshot)
    for proc, log in profile.writers.values():
        assert proc.poll() is None, log.read_text(errors="replace")[-5000:]


def test_postgres_restart_under_both_writers_is_waited_out(profile: Profile) -> None:
    assert len(profile.writers) == 2, "runs after the writers started"
    logs = tuple(log for _, log in profile.writers.values())
    before = {log: log.stat().st_size for log in logs}

    def since_stop(log: Path) -> str:
        with log.open("rb") as f:
            f.seek(before[log])
            return f.read().decode(errors="replace")

    profile.pg.stop()
    try:
        for stream in ("a", "b"):
            produce(profile.config_path, "--stream", stream, "--start", "2026-11-22T03:00:00+00:00", "--hours", "1",
                    "--events-per-hour", "200", "--events-per-file", "100", "--seed", "8")
        # each writer has a batch to commit and finds the catalog gone (its commit is retried, the batch kept)
        wait(lambda: all("catalog busy or unreachable (attempt" in since_stop(log) for log in logs),
             "both writers meet the stopped catalog", logs=logs)
    finally:
        profile.pg.start()
    for stream in ("a", "b"):
        wait(lambda s=stream: assert_exactly_once(profile.config_path, s) is not None,  # type: ignore[misc]
             f"stream {stream} exact after the restart", logs=logs)
    config = load(profile.config_path)
    from laketide.ingest.runner import stop_file

    for stream in config.streams:
        stop_file(stream).touch()
    for group, (proc, log) in profile.writers.items():
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise
        text = log.read_text(errors="replace")
        assert code == 0, f"writer {group}: {text[-5000:]}"
        assert "Traceback" not in text, text[-5000:]
    for stream in ("a", "b"):
        assert_exactly_once(profile.config_path, stream)
