"""
### laketide ingest: the exactly-once writers of the streams

Each writer DAG runs `spark_jobs/ingest_stream.py` through the `spark_default` connection (local Spark by default;
a standalone master, YARN or Kubernetes by changing the connection).

* **`laketide_ingest_<group>`** (continuous): the writer application of a group of streams (the streams whose
  `group` is this; a stream without one is a group of its own, named like it). One Spark application runs every
  stream of the group, each with its own checkpoint, tables, lease and failure: a stream that fails stops alone
  and is reported, the others go on. The `@continuous` schedule with one active run keeps exactly one application
  alive, and retries restart it from the streams' checkpoints. Every batch commits exactly once, whenever the
  application is killed or paused.
* **`laketide_ingest_<stream>_once`** (manual): process what has landed for one stream, then stop. It runs only
  while no other writer of the stream is alive: beside a running writer application it fails at once, naming it
  (that writer already ingests everything that lands; pause its DAG first to run a one-off instead).

A stream whose checkpoint and table disagree refuses to start (the stream alone, in a group): see the operations
guide (redo from a snapshot) before resetting anything.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from laketide.airflow.operators import FATAL_EXIT_CODES, LaketideSparkSubmitOperator
from laketide.config import get_config

_config = get_config()
for _group, _streams in _config.groups().items():
    _names = ", ".join(s.name for s in _streams)
    with DAG(
        dag_id=f"laketide_ingest_{_group}",
        description=f"Exactly-once continuous writers of stream(s) {_names} in one application",
        doc_md=__doc__,
        schedule="@continuous",
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["laketide", "ingest", *[s.name for s in _streams]],
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
            job_args=["--group", _group, "--mode", "continuous"],
            name=f"laketide-ingest-{_group}",
        )
    globals()[_dag.dag_id] = _dag

for _stream in _config.streams:
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
