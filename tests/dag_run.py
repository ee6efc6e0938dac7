"""Run one DAG with ``dag.test()`` in a process of its own, on the Airflow metadata database its environment
names: ``python -m tests.dag_run <dag file> <dag id> '<json: run_conf, logical_date>'``. Prints the run's state and
its tasks' states as one JSON line (the last line of its output)."""

from __future__ import annotations

import json
import sys
from datetime import datetime


def main(argv: list[str]) -> int:
    from airflow.dag_processing.dagbag import DagBag

    path, dag_id, raw = argv
    kwargs = json.loads(raw)
    if "logical_date" in kwargs:
        kwargs["logical_date"] = datetime.fromisoformat(kwargs["logical_date"])
    bag = DagBag(dag_folder=path)
    if bag.import_errors:
        print(json.dumps({"state": "import_error", "errors": {k: str(v) for k, v in bag.import_errors.items()}}))
        return 1
    run = bag.dags[dag_id].test(**kwargs)
    tasks = {ti.task_id: ti.state for ti in run.get_task_instances()}
    print(json.dumps({"state": run.state, "tasks": tasks}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
