"""The local Airflow from a shell (``./laketide``): trigger a DAG, then follow its run and print what it recorded.

:func:`trigger` starts a run (``airflow dags trigger``) and says which and where to follow it. :func:`follow` waits,
bounded, for the run to record its outcome in the action record (``close.action_table``: a redo's plan from its
``validate`` task, a backfill's or repair's report from its job, dry runs included) and prints it: what the run
decided, not a plan computed beside it. The run's state comes from ``airflow dags list-runs``, so a failed run is
reported as soon as Airflow knows, not when the wait runs out.

Exit codes of :func:`follow`: 0 the run recorded its outcome (printed), 1 the run failed or ended without recording
one, 3 it did not end within the wait (it goes on: the message says where to follow it).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laketide.config import REPO_ROOT, LaketideConfig

#: how long a dry run's command waits for its run by default (seconds)
DEFAULT_WAIT = 600.0
#: how often the action record is read while waiting, and Airflow asked for the run's state (seconds)
RECORD_POLL = 2.0
STATE_POLL = 10.0
#: exit code of a run that did not end within the wait
NOT_DONE = 3


def airflow_env(config: LaketideConfig) -> dict[str, str]:
    """The environment of an ``airflow`` command on the local installation (the one ``make run`` starts)."""
    env = dict(os.environ)
    env.setdefault("AIRFLOW_HOME", str(config.home / "airflow"))
    env.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO_ROOT / "dags"))
    env.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(REPO_ROOT / "plugins"))
    env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    env["TZ"] = "UTC"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def airflow_command(*args: str) -> list[str]:
    return [*shlex.split(os.environ.get("LAKETIDE_AIRFLOW_CLI", "airflow")), *args]


def run_url(dag_id: str, run_id: str) -> str:
    base = os.environ.get("AIRFLOW__API__BASE_URL") or f"http://localhost:{os.environ.get('LAKETIDE_PORT', '8080')}"
    return f"{base.rstrip('/')}/dags/{dag_id}/runs/{urllib.parse.quote(run_id, safe='')}"


def trigger(config: LaketideConfig, dag_id: str, conf: dict[str, Any], where: str = "") -> tuple[int, str]:
    """Trigger ``dag_id`` with ``conf`` on the local Airflow (``airflow dags trigger``): its exit code and the run's
    id. Says which run started and where to follow it (``where``: what to read in it), not Airflow's table of the
    run's twelve fields."""
    home = Path(airflow_env(config)["AIRFLOW_HOME"])
    if not (home / "airflow.db").exists() and not os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        print(f"error: no Airflow installation in {home}: start laketide first (make run), or set AIRFLOW_HOME",
              file=sys.stderr)
        return 2, ""
    command = airflow_command("dags", "trigger", dag_id, "--conf", json.dumps(conf), "--output", "json")
    print(f"==> {shlex.join(command)}", flush=True)
    done = subprocess.run(command, env=airflow_env(config), capture_output=True, text=True)
    run = _json_list(done.stdout)
    if done.returncode != 0 or not run:  # Airflow's own words, whatever they are
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        return done.returncode or 1, ""
    run_id = str(run[0].get("run_id") or run[0].get("dag_run_id") or "")
    print(f"{dag_id}: run {run_id} {run[0].get('state') or 'queued'}"
          f"{' (a dry run: nothing changes)' if conf.get('dry_run') else ''}")
    print(f"follow it: {run_url(dag_id, run_id)}{f' ({where})' if where else ''}, "
          f"or ./laketide airflow dags list-runs {dag_id}", flush=True)
    return 0, run_id


def _json_list(output: str) -> list[dict[str, Any]]:
    """The list of objects an ``airflow ... --output json`` printed, or ``[]``. Airflow's log lines may come before
    it on the same stream (``... [info     ] creating dag run ...``): the list is the first line that parses."""
    decoder = json.JSONDecoder()
    at = 0
    for line in output.splitlines(keepends=True):
        if line.startswith("["):
            try:
                rows, _ = decoder.raw_decode(output, at)
            except ValueError:
                rows = None
            if isinstance(rows, list):
                return [r for r in rows if isinstance(r, dict)]
        at += len(line)
    return []


def run_state(config: LaketideConfig, dag_id: str, run_id: str) -> str | None:
    """The state of run ``run_id`` of ``dag_id`` as Airflow has it (queued, running, success, failed), or None when
    Airflow could not say."""
    done = subprocess.run(airflow_command("dags", "list-runs", dag_id, "--output", "json"),
                          env=airflow_env(config), capture_output=True, text=True)
    states = [str(r.get("state")) for r in _json_list(done.stdout) if r.get("run_id") == run_id]
    return states[0] if done.returncode == 0 and states else None


def follow(config: LaketideConfig, dag_id: str, run_id: str, stream: str, wait: float,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> int:
    """Wait up to ``wait`` seconds for run ``run_id`` to record its outcome in the action record, and print it."""
    from laketide.redo.actions import FINAL, records

    print(f"waiting up to {wait:.0f} s for the run to record what it decided (--no-wait: do not wait) ...",
          flush=True)
    deadline = clock() + wait
    state, asked = "queued", float("-inf")
    while True:
        if clock() - asked >= STATE_POLL:
            state, asked = run_state(config, dag_id, run_id) or state, clock()
        final = [r for r in records(config, stream, run_id) if r.outcome in FINAL]  # read after the state
        if final:
            last = final[-1]
            print(f"{dag_id}: run {run_id} recorded {last.outcome} at {last.recorded_at.isoformat(timespec='seconds')}"
                  f" ({config.close.action_table}):")
            print("\n".join(f"  {line}" for line in last.lines()) or "  (no report lines)")
            return 0
        if state in ("failed", "success"):
            what = "failed" if state == "failed" else "ended without recording an outcome"
            print(f"error: {dag_id}: run {run_id} {what}: its task logs say why: {run_url(dag_id, run_id)}",
                  file=sys.stderr)
            return 1
        if clock() >= deadline:
            print(f"error: {dag_id}: run {run_id} is still {state} after {wait:.0f} s (is the DAG paused, or the "
                  f"scheduler down? ./laketide airflow dags list-runs {dag_id}); it goes on: "
                  f"{run_url(dag_id, run_id)}, or wait longer with --wait SECONDS", file=sys.stderr)
            return NOT_DONE
        sleep(min(RECORD_POLL, max(0.0, deadline - clock())))
