"""
### laketide ingest: the continuous exactly-once writer of one stream

One DAG per configured stream. It submits `spark_jobs/ingest_stream.py` through the `spark_default`
connection (local Spark by default; a standalone master, YARN or Kubernetes by changing the connection).

* **continuous** (default): the writer runs micro-batches on the stream's trigger interval and never ends;
  the `@continuous` schedule with one active run keeps exactly one writer alive, and retries restart it
  from its checkpoint. Every batch commits exactly once, whenever the writer is killed.
* **incremental**: trigger the DAG with `mode = incremental` to process what has landed and stop.

A writer whose checkpoint and table disagree refuses to start and the task fails without retrying:
see the operations guide (redo from a snapshot) before resetting anything.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from laketide.airflow.operators import LaketideSparkSubmitOperator
from laketide.config import get_config

for _stream in get_config().streams:
    with DAG(
        dag_id=f"laketide_ingest_{_stream.name}",
        description=f"Exactly-once writer: {_stream.landing_path} -> {_stream.table}",
        doc_md=__doc__,
        schedule="@continuous",
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["laketide", "ingest", _stream.name],
        default_args={
            "owner": "laketide",
            "retries": 100,
            "retry_delay": timedelta(seconds=20),
            "retry_exponential_backoff": True,
            "max_retry_delay": timedelta(minutes=10),
        },
        params={
            "mode": Param(
                "continuous",
                type="string",
                enum=["continuous", "incremental"],
                title="Run mode",
                description="continuous: keep running; incremental: process what has landed, then stop.",
            ),
        },
    ) as _dag:
        LaketideSparkSubmitOperator(
            task_id="writer",
            job="ingest_stream.py",
            job_args=["--stream", _stream.name, "--mode", "{{ params.mode }}"],
            name=f"laketide-ingest-{_stream.name}",
        )
    globals()[_dag.dag_id] = _dag
