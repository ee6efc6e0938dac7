"""Run one DAG with ``dag.test()`` in a process of its own, on the Airflow metadata database its environment
names: ``python -m tests.dag_run <dag file> <dag id> '<json: run_conf, logical_date>'``. Prints the run's state and
its tasks' states as one JSON line (written in one call, on a line of its own: the OpenLineage listener's thread logs
to the same output meanwhile)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    from airflow.dag_processing.dagbag import DagBag

    path, dag_id, raw = argv
    kwargs = json.loads(raw)
    if "logical_date" in kwargs:
        kwargs["logical_date"] = datetime.fromisoformat(kwargs["logical_date"])
    bag = DagBag(dag_folder=path)
    if bag.import_errors:
        result({"state": "import_error", "errors": {k: str(v) for k, v in bag.import_errors.items()}})
        return 1
    run = bag.dags[dag_id].test(**kwargs)
    tasks = {ti.task_id: ti.state for ti in run.get_task_instances()}
    result({"state": run.state, "tasks": tasks})
    return 0


def result(outcome: dict[str, object]) -> None:
    sys.stdout.write("\n" + json.dumps(outcome, default=str) + "\n")
    sys.stdout.flush()


def run_in_process(dag_file: Path, dag_id: str, env: dict[str, str], cwd: Path,
                   **kwargs: Any) -> tuple[dict[str, Any], str]:
    """Run ``dag_id`` of ``dag_file`` as this module does, in a process of its own with ``env``; its result (the JSON
    line) and its whole output. Fails the test when the process fails or prints no result."""
    command = [sys.executable, "-m", "tests.dag_run", str(dag_file), dag_id, json.dumps(kwargs, default=str)]
    run = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=400)
    output = run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith('{"state"')]
    assert run.returncode == 0 and lines, output[-6000:]
    # the JSON object at the start of its line (another thread's log line may have been written right after it)
    result: dict[str, Any] = json.JSONDecoder().raw_decode(lines[-1])[0]
    return result, output


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
