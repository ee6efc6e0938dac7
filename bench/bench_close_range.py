"""Benchmark: the close DAG of a replayed stream under the real scheduler, a close range of 72 hours and one hour.

Builds a small lake of replayed history (``--hours`` + 1 hours of 2012 for a ``live: false`` stream, landed by the
bundled producer and ingested by the real writer process; a few events an hour: the point is the orchestration's
cost, not the data's), then starts real Airflow components on a throwaway home (API server, scheduler, DAG processor,
triggerer; LocalExecutor) with the Airflow settings ``scripts/run.sh`` uses (``scripts/airflow_env.sh``), and times:

``one hour``
    a run triggered with the first hour as its partition key (what a scheduled run of a live stream does);
``range``
    a close range run over the next ``--hours`` hours (``start``/``end`` params, as ``./laketide close`` starts it).

For each run: the wall time from the trigger to the run's end, the number of task instances, and per task type
the median and max of the task's duration as Airflow records it (``end - start`` of the task instance), of its
wait in the queue (``start - queued``) and of laketide's own work inside it: the figure of the task's
``laketide work`` log line (``laketide.airflow.timing``, logged at the callable's end), so that the rest of a
task's duration (process start, imports, DAG parsing, the Task SDK's calls) shows as overhead. The load average
is printed next to the figures: the machine may be shared.

Run from the repository root (jars provisioned)::

    .venv/bin/python bench/bench_close_range.py                     # 72 hours
    .venv/bin/python bench/bench_close_range.py --hours 12 --env AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.helpers import run_writer, write_config  # noqa: E402
from tests.processes import descendants, free_port  # noqa: E402

DAG_ID = "laketide_close_clicks"
START = datetime(2012, 3, 5, 0, tzinfo=UTC)
WORK = re.compile(r"laketide work ([0-9.]+) s")


def build_lake(home: Path, hours: int, events: int) -> Path:
    """``hours`` hours of 2012 landed by the producer and ingested by the writer, for a replayed stream."""
    from laketide.dev import producer

    config = write_config(home, catalog_name="bench", java_options="", live=False, idle_window="3s",
                          allowed_lateness="10m", max_files_per_trigger=200)
    code = producer.main(["--config", str(config), "--mode", "backfill", "--start", START.isoformat(), "--hours",
                          str(hours), "--events-per-hour", str(events), "--events-per-file", str(events),
                          "--malformed-ratio", "0.05", "--seed", "7"])
    assert code == 0, f"the producer exited with {code}"
    assert run_writer(config, "incremental", timeout=900) == 0, f"the writer failed: see {home}/writer.log"
    return config


def airflow_env(home: Path, config: Path, port: int, extra: dict[str, str]) -> dict[str, str]:
    """The environment of the Airflow components: run.sh's settings (scripts/airflow_env.sh), this run's home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKETIDE", "AIRFLOW"))}
    airflow_home = home / "airflow"
    airflow_home.mkdir(parents=True, exist_ok=True)
    password = "bench-admin"
    (airflow_home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps({"admin": password}))
    base = f"http://localhost:{port}"
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "TZ": "UTC",
        "LAKETIDE_CONFIG": str(config), "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(port + 1),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(port + 2),
        "AIRFLOW_CONN_LAKETIDE_AIRFLOW_API": json.dumps({"conn_type": "http", "host": base, "login": "admin",
                                                         "password": password}),
    })
    # run.sh's Airflow settings, as it exports them (each overridable from the environment)
    out = subprocess.run(["bash", "-c", f"source {REPO_ROOT / 'scripts' / 'airflow_env.sh'} && env -0"],
                         env=env, capture_output=True, check=True).stdout.decode()
    settings = dict(line.split("=", 1) for line in out.split("\0") if line.startswith("AIRFLOW__"))
    env.update(settings)
    env.update(extra)
    return env


class Api:
    def __init__(self, base: str) -> None:
        self.base = base
        self.token = ""

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.base}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {self.token}"} if self.token else {})})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return dict(json.loads(resp.read() or b"{}"))

    def login(self) -> None:
        self.token = self.call("POST", "/auth/token", {"username": "admin", "password": "bench-admin"})["access_token"]


def wait_until(what: str, check: Any, timeout: float, procs: list[subprocess.Popen[bytes]]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise SystemExit(f"an Airflow component exited ({proc.args!r}) while waiting for {what}")
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def run_and_wait(api: Api, body: dict[str, Any], timeout: float,
                 procs: list[subprocess.Popen[bytes]]) -> tuple[str, float]:
    started = time.monotonic()
    run_id = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", body)["dag_run_id"]

    def ended() -> str | None:
        state = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
        return str(state) if state in ("success", "failed") else None

    state = wait_until(f"run {run_id}", ended, timeout, procs)
    wall = time.monotonic() - started
    if state != "success":
        print(f"warning: run {run_id} ended {state}", flush=True)
    return run_id, wall


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def work_seconds(log: Path) -> float | None:
    """The seconds of the task's ``laketide work`` log line (None without one)."""
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                found = WORK.search(str(json.loads(line).get("event", "")))
                if found:
                    return float(found.group(1))
    return None


def task_figures(home: Path, run_id: str) -> dict[str, dict[str, list[float]]]:
    """Per task id: durations, queue waits and work times of the run's task instances (first try)."""
    db = home / "airflow" / "airflow.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        rows = c.execute("select task_id, map_index, start_date, end_date, queued_dttm, try_number from task_instance "
                         "where dag_id = ? and run_id = ?", (DAG_ID, run_id)).fetchall()
    logs = home / "airflow" / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
    figures: dict[str, dict[str, list[float]]] = {}
    for task_id, map_index, start, end, queued, tries in rows:
        f = figures.setdefault(task_id, {"duration": [], "queued": [], "work": [], "tries": []})
        s, e, q = _parse(start), _parse(end), _parse(queued)
        if s and e:
            f["duration"].append((e - s).total_seconds())
        if s and q:
            f["queued"].append((s - q).total_seconds())
        f["tries"].append(float(tries))
        folder = logs / f"task_id={task_id}" / (f"map_index={map_index}" if map_index >= 0 else "")
        work = work_seconds(folder / "attempt=1.log")
        if work is not None:
            f["work"].append(work)
    return figures


def report(title: str, wall: float, figures: dict[str, dict[str, list[float]]]) -> None:
    count = sum(len(f["tries"]) for f in figures.values())
    print(f"\n{title}: {wall:.1f} s wall, {count} task instances; load average {os.getloadavg()[0]:.1f} "
          f"(1 min), {os.getloadavg()[2]:.1f} (15 min)")
    print(f"  {'task':32}{'n':>4}{'duration med/max s':>22}{'queued med/max s':>20}{'work med/max s':>18}"
          f"{'overhead med s':>16}")

    def mm(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} / {max(values):.1f}" if values else "-"

    for task_id in sorted(figures):
        f = figures[task_id]
        over = (f"{statistics.median(f['duration']) - statistics.median(f['work']):.1f}"
                if f["duration"] and f["work"] else "-")
        retried = sum(1 for t in f["tries"] if t > 1)
        print(f"  {task_id:32}{len(f['tries']):>4}{mm(f['duration']):>22}{mm(f['queued']):>20}{mm(f['work']):>18}"
              f"{over:>16}" + (f"  ({retried} retried)" if retried else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=int, default=72, help="hours of the close range (one more is landed)")
    parser.add_argument("--events-per-hour", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an Airflow setting for every component (e.g. AIRFLOW__CORE__PARALLELISM=8)")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway home (logs) and print where")
    args = parser.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix="laketide-close-range-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        began = time.monotonic()
        config = build_lake(home, args.hours + 1, args.events_per_hour)
        print(f"lake: {args.hours + 1} hours landed and ingested in {time.monotonic() - began:.0f} s", flush=True)
        port = free_port()
        env = airflow_env(home, config, port, dict(e.split("=", 1) for e in args.env))
        logs = home / "logs"
        logs.mkdir()
        subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)

        def start(*command: str) -> None:
            out = open(logs / f"{command[0]}.log", "ab")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(["airflow", *command], env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True))

        api = Api(f"http://localhost:{port}")
        start("api-server")
        wait_until("the API server", lambda: api.call("GET", "/api/v2/monitor/health"), 300, procs)
        for component in ("scheduler", "dag-processor", "triggerer"):
            start(component)
        api.login()
        wait_until(f"{DAG_ID} parsed", lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}"), 600, procs)
        api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})

        first = START.replace(tzinfo=None).isoformat()
        run_id, wall = run_and_wait(api, {"logical_date": None, "partition_key": first}, args.timeout, procs)
        report(f"one hour ({first})", wall, task_figures(home, run_id))
        start_, end_ = START + timedelta(hours=1), START + timedelta(hours=args.hours + 1)
        run_id, wall = run_and_wait(api, {"logical_date": None, "conf": {"start": start_.isoformat(),
                                                                         "end": end_.isoformat()}},
                                    args.timeout, procs)
        report(f"close range of {args.hours} hours", wall, task_figures(home, run_id))
    finally:
        left = descendants([p.pid for p in procs])
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for pid in left | descendants([p.pid for p in procs]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if args.keep:
            print(f"kept {home}")
        else:
            subprocess.run(["rm", "-rf", str(home)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
