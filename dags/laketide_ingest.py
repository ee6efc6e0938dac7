"""
### laketide ingest: the exactly-once writer of one stream

Two DAGs per configured stream, both submitting `spark_jobs/ingest_stream.py` through the `spark_default`
connection (local Spark by default; a standalone master, YARN or Kubernetes by changing the connection).

* **`laketide_ingest_<stream>`** (continuous): the writer runs micro-batches on the stream's trigger interval
  and never ends; the `@continuous` schedule with one active run keeps exactly one writer alive, and retries
  restart it from its checkpoint. Every batch commits exactly once, whenever the writer is killed or paused.
* **`laketide_ingest_<stream>_once`** (manual): process what has landed, then stop. It runs only while no
  other writer of the stream is alive: beside a running continuous writer it fails at once, naming it (the
  continuous writer already ingests everything that lands; pause its DAG first to run a one-off instead).

A writer whose checkpoint and table disagree refuses to start and the task fails without retrying:
see the operations guide (redo from a snapshot) before resetting anything.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from laketide.airflow.operators import FATAL_EXIT_CODES, LaketideSparkSubmitOperator
from laketide.config import get_config

for _stream in get_config().streams:
    with DAG(
        dag_id=f"laketide_ingest_{_stream.name}",
        description=f"Exactly-once continuous writer: {_stream.landing_path} -> {_stream.table}",
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
    ) as _dag:
        LaketideSparkSubmitOperator(
            task_id="writer",
            job="ingest_stream.py",
            job_args=["--stream", _stream.name, "--mode", "continuous"],
            name=f"laketide-ingest-{_stream.name}",
        )
    globals()[_dag.dag_id] = _dag

    with DAG(
        dag_id=f"laketide_ingest_{_stream.name}_once",
        description=f"One-off ingestion of what has landed: {_stream.landing_path} -> {_stream.table}",
        doc_md=__doc__,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["laketide", "ingest", _stream.name],
        default_args={"owner": "laketide", "retries": 1, "retry_delay": timedelta(seconds=30)},
    ) as _dag:
        LaketideSparkSubmitOperator(
            task_id="writer",
            job="ingest_stream.py",
            job_args=["--stream", _stream.name, "--mode", "incremental"],
            name=f"laketide-ingest-{_stream.name}-once",
            # beside a live writer a retry would only wait: refuse at once with the job's message
            fatal_exit_codes={**FATAL_EXIT_CODES, 4: "another writer of the stream is running"},
        )
    globals()[_dag.dag_id] = _dag
