"""The DAG of an hour-range action of ``laketide.redo`` (backfill, repair): one form, one validation, one job.

``dags/laketide_backfill.py`` and ``dags/laketide_repair.py`` each build theirs with :func:`hour_range_action_dag`:
the same params (stream, start, end, dry run), a ``validate`` task that checks every param before Spark starts,
and the action's Spark job (``spark_jobs/<action>.py``) through the Spark submit operator.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from laketide.airflow.operators import LaketideSparkSubmitOperator
from laketide.config import get_config
from laketide.redo.cli import FATAL_EXIT_CODES, job_args
from laketide.redo.overwrite import Kind


def hour_range_action_dag(action: Kind, *, description: str, doc_md: str | None, stream_help: str,
                          dry_run_help: str) -> DAG:
    """The manual DAG ``laketide_<action>`` of the configured streams."""
    streams = [s.name for s in get_config().streams]
    with DAG(
        dag_id=f"laketide_{action}",
        description=description,
        doc_md=doc_md,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["laketide", "redo"],
        default_args={"owner": "laketide", "retries": 1, "retry_delay": timedelta(minutes=2)},
        params={
            "stream": Param(streams[0] if streams else "", type="string", enum=streams or [""], title="Stream",
                            description=stream_help),
            "start": Param(None, type=["null", "string"], format="date-time", title="Start",
                           description="first hour, a UTC hour start with its offset, e.g. 2026-11-22T03:00:00+00:00"),
            "end": Param(None, type=["null", "string"], format="date-time", title="End",
                         description="first hour after the range (exclusive); its hours must be finished by the "
                                     "writer"),
            "dry_run": Param(True, type="boolean", title="Dry run", description=dry_run_help),
        },
    ) as dag:

        @task
        def validate(**context: Any) -> dict[str, str]:
            """Check every param before Spark starts (a bad request is not retried and changes nothing)."""
            from airflow.sdk.exceptions import AirflowFailException

            from laketide.airflow.hooks import airflow_config
            from laketide.errors import ActionRequestError
            from laketide.redo.cli import check_params

            try:
                return check_params(airflow_config(), action, dict(context["params"]),
                                    context["dag_run"].triggering_user_name)
            except ActionRequestError as exc:
                raise AirflowFailException(f"{action} refused: {exc}") from exc

        validate() >> LaketideSparkSubmitOperator(
            task_id=action,
            job=f"{action}.py",
            job_args=job_args("validate"),
            fatal_exit_codes=FATAL_EXIT_CODES,
            name=f"laketide-{action}",
            action=action,
        )
    return dag
