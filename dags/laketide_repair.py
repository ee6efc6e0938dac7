"""
### laketide repair: remove duplicate event ids (re-sent data)

Manual. For the hours `[start, end)` of one stream, every event id held more than once keeps its
first-ingested row (smallest batch id, then landing file name); the hours are replaced by the kept rows in one
atomic commit, checked afterwards (each id once, the planned rows per hour). A second run finds nothing and
commits nothing. Use it when a producer re-sent files under new names and the close's unique-id expectation
failed.

* **validate**: every param is checked before Spark starts: a configured stream, whole UTC hours with an offset,
  start before end, inside the table, and hours the live writer has finished (its watermark past end +
  `allowed_lateness`). A bad request fails here, without retry, and changes nothing.
* **repair**: the Spark job (`spark_jobs/repair.py`). A dry run reports the rows per hour that would be removed
  and changes nothing. The commit's summary counts the removed rows per hour (`laketide.duplicates-removed`):
  verification and reconciliation count them with the lake, as the audit records still count the re-sent lines.
  Every touched hour is recorded `reopened` in the status table with the action (who, when,
  from which snapshot, rows before/after per hour); the close DAG verifies and closes it again.

Guide: docs/operations.md (Repair re-sent data).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from laketide.airflow.operators import LaketideSparkSubmitOperator
from laketide.config import get_config
from laketide.redo.cli import FATAL_EXIT_CODES, job_args

_config = get_config()
_streams = [s.name for s in _config.streams]

with DAG(
    dag_id="laketide_repair",
    description="Remove duplicate event ids from an hour range of a stream, keeping the first-ingested row",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["laketide", "redo"],
    default_args={"owner": "laketide", "retries": 1, "retry_delay": timedelta(minutes=2)},
    params={
        "stream": Param(_streams[0] if _streams else "", type="string", enum=_streams or [""], title="Stream",
                        description="the stream whose hours are repaired"),
        "start": Param(None, type=["null", "string"], format="date-time", title="Start",
                       description="first hour, a UTC hour start with its offset, e.g. 2026-11-22T03:00:00+00:00"),
        "end": Param(None, type=["null", "string"], format="date-time", title="End",
                     description="first hour after the range (exclusive); its hours must be finished by the writer"),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="report the rows per hour that would be removed, change nothing"),
    },
) as dag:

    @task
    def validate(**context: Any) -> dict[str, str]:
        """Check every param before Spark starts (a bad request is not retried and changes nothing)."""
        from airflow.sdk.exceptions import AirflowFailException

        from laketide.errors import ActionRequestError
        from laketide.redo.cli import check_params

        try:
            return check_params("repair", dict(context["params"]), context["dag_run"].triggering_user_name)
        except ActionRequestError as exc:
            raise AirflowFailException(f"repair refused: {exc}") from exc

    validate() >> LaketideSparkSubmitOperator(
        task_id="repair",
        job="repair.py",
        job_args=job_args("validate"),
        fatal_exit_codes=FATAL_EXIT_CODES,
        name="laketide-repair",
    )

if __name__ == "__main__":
    dag.test()
