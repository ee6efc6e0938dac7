"""
### laketide backfill: re-ingest an hour range from the landing zone

Manual. For the hours `[start, end)` of one stream, the landing files the writer ingested are read again and
parsed exactly as the writer does; the events table's hours and the rejects of those files are replaced, each
in one atomic commit (a run twice gives the same tables). Use it when an hour's rows are wrong but its landing
files are right: files fixed in place, rows lost or damaged in the table.

* **validate**: every param is checked before Spark starts: a configured stream, whole UTC hours with an offset,
  start before end, inside the table, and hours the live writer has finished (its watermark past end +
  `allowed_lateness`); an ingested file of the range missing from the landing zone refuses it. A bad request
  fails here, without retry, and changes nothing.
* **backfill**: the Spark job (`spark_jobs/backfill.py`). A dry run counts rows per hour before and after and
  changes nothing. Every touched hour is recorded `reopened` in the status table with the action (who, when,
  from which snapshot, rows before/after per hour); the close DAG verifies and closes it again.

Guide: docs/operations.md (Backfill an hour range).
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
    dag_id="laketide_backfill",
    description="Re-ingest an hour range of a stream from its landing zone (atomic overwrite of those hours)",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["laketide", "redo"],
    default_args={"owner": "laketide", "retries": 1, "retry_delay": timedelta(minutes=2)},
    params={
        "stream": Param(_streams[0] if _streams else "", type="string", enum=_streams or [""], title="Stream",
                        description="the stream whose hours are re-ingested"),
        "start": Param(None, type=["null", "string"], format="date-time", title="Start",
                       description="first hour, a UTC hour start with its offset, e.g. 2026-11-22T03:00:00+00:00"),
        "end": Param(None, type=["null", "string"], format="date-time", title="End",
                     description="first hour after the range (exclusive); its hours must be finished by the writer"),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="count rows per hour before and after, change nothing"),
    },
) as dag:

    @task
    def validate(**context: Any) -> dict[str, str]:
        """Check every param before Spark starts (a bad request is not retried and changes nothing)."""
        from airflow.sdk.exceptions import AirflowFailException

        from laketide.errors import ActionRequestError
        from laketide.redo.cli import check_params

        try:
            return check_params("backfill", dict(context["params"]), context["dag_run"].triggering_user_name)
        except ActionRequestError as exc:
            raise AirflowFailException(f"backfill refused: {exc}") from exc

    validate() >> LaketideSparkSubmitOperator(
        task_id="backfill",
        job="backfill.py",
        job_args=job_args("validate"),
        fatal_exit_codes=FATAL_EXIT_CODES,
        name="laketide-backfill",
    )

if __name__ == "__main__":
    dag.test()
