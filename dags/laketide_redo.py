"""
### laketide redo: return a stream to a snapshot and re-ingest what landed since

Manual, with a form. Use it when the events table went wrong after a known good snapshot (wrong rows appended,
rows deleted, a bad fix) or when the writer refuses to start because its checkpoint and table disagree and the
checkpoint is right.

* **stream**: the configured stream;
* **snapshot_id**, or **at**: the events table's snapshot to return to, or a time (the snapshot current then:
  the last entry of the table's history at or before it). Exactly one;
* **start** / **end** (optional): the hours `[start, end)` the redo may change; a redo whose rollback changes
  an hour outside them is refused;
* **dry_run** (default on): report what would change (snapshots left out, rejects snapshot, files to re-ingest,
  rows per hour now and at the snapshot) and change nothing.

1. **validate**: every param is checked against the configuration and the table before anything changes (and a
   redo of a stream whose redo runs is refused); the plan is logged. A bad param fails here, without retry.
2. **apply** (skipped in a dry run) then **redo**: `spark_jobs/redo.py` stops the stream's writer (stop file) and
   holds its lease (the ingest DAG's restarts are refused meanwhile), rolls the events and rejects tables back,
   rebuilds the writer's checkpoint at the snapshot, re-ingests every landing file since with the writer's own
   code, records each changed hour as reopened (who, when, from which snapshot, rows before and after), then
   releases the stream: the ingest DAG's writer resumes from the rebuilt checkpoint. Cleared after a failure,
   it finishes the interrupted redo.
3. **reclose_<stream>**: each reopened hour is verified (Great Expectations) and closed again, with an Asset event
   partitioned by the hour; then **done_markers_<stream>** when the stream configures done-markers.

Guide: docs/operations.md (Redo from a snapshot).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from laketide.airflow.assets import closed_partitions_asset
from laketide.airflow.callbacks import alert
from laketide.airflow.close_task import close_task
from laketide.airflow.hooks import airflow_config
from laketide.airflow.operators import FATAL_EXIT_CODES, LaketideSparkSubmitOperator
from laketide.config import get_config

_config = get_config()
_CHECKED = "ti.xcom_pull(task_ids='validate')"

with DAG(
    dag_id="laketide_redo",
    description="Return a stream to a snapshot, re-ingest what landed since, re-verify the hours it changed",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["laketide", "redo"],
    default_args={"owner": "laketide", "retries": 1, "retry_delay": timedelta(minutes=2)},
    params={
        "stream": Param(_config.streams[0].name if _config.streams else None, type="string",
                        enum=[s.name for s in _config.streams], title="Stream",
                        description="The stream to redo (its events and rejects tables, its writer's checkpoint)"),
        "snapshot_id": Param(None, type=["null", "string"], pattern="^[0-9]+$", title="Snapshot id",
                             description="The events table's snapshot to return to, as digits (the snapshots "
                                         "metadata table lists them; a text field because ids are 64-bit and a "
                                         "browser's number field rounds them). Give this or 'at'."),
        "at": Param(None, type=["null", "string"], format="date-time", title="Or: at time",
                    description="Return to the snapshot that was current at this time (ISO with offset, e.g. "
                                "2026-11-22T03:00:00+00:00). Give this or 'snapshot_id'."),
        "start": Param(None, type=["null", "string"], format="date-time", title="Hours: start",
                       description="Optional: first hour the redo may change (a UTC hour start). A redo that would "
                                   "change hours outside [start, end) is refused."),
        "end": Param(None, type=["null", "string"], format="date-time", title="Hours: end",
                     description="Optional: end of the range, exclusive (a UTC hour start)."),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="Report what would change and change nothing. Turn off to redo."),
    },
) as redo_dag:

    @task
    def validate(**context: Any) -> dict[str, Any]:
        """Check every param and log the plan; a bad param fails without retry and changes nothing."""
        import getpass
        import logging

        from airflow.sdk.exceptions import AirflowFailException

        from laketide.errors import RedoBusyError, RequestError
        from laketide.redo import actions
        from laketide.redo.job import check_scope, running_redo
        from laketide.redo.params import validate as check
        from laketide.redo.plan import plan_request

        params = context["params"]
        dag_run = context.get("dag_run")
        user = getattr(dag_run, "triggering_user_name", None) or getpass.getuser()
        config = airflow_config()
        try:
            request = check(config, params.get("stream"), params.get("snapshot_id"), params.get("at"),
                            params.get("start"), params.get("end"), params.get("dry_run", True), context["run_id"],
                            user)
            other = running_redo(config, config.stream(request.stream))
            if other is not None:
                raise RedoBusyError(f"another redo of stream {request.stream!r} is running ({other})")
            plan = plan_request(config, request)
            check_scope(plan, request)
        except (RequestError, RedoBusyError) as exc:
            raise AirflowFailException(f"redo refused, nothing changed: {exc}") from exc
        report = plan.lines(request.hours)
        if request.dry_run:
            report = ["DRY RUN: nothing changes; the redo would do this:", *report]
        # the task log's first lines (a logger, not print: printed lines reach the log only when the task ends)
        for line in report:
            logging.getLogger("laketide.redo").info("%s", line)
        actions.record(config, actions.from_redo_plan(plan, request, report))
        return {"stream": request.stream, "snapshot_id": str(request.snapshot_id), "user": request.user,
                "start": request.hours.start.isoformat() if request.hours.start else "",
                "end": request.hours.end.isoformat() if request.hours.end else "",
                "dry_run": request.dry_run, "report": report}

    @task.short_circuit
    def apply(checked: dict[str, Any]) -> bool:
        """A dry run ends here: the report is in the validate task's log and XCom."""
        return not checked["dry_run"]

    checked = validate()
    redo = LaketideSparkSubmitOperator(
        task_id="redo",
        job="redo.py",
        job_args=["--stream", f"{{{{ {_CHECKED}['stream'] }}}}",
                  "--snapshot-id", f"{{{{ {_CHECKED}['snapshot_id'] }}}}",
                  "--start", f"{{{{ {_CHECKED}['start'] }}}}", "--end", f"{{{{ {_CHECKED}['end'] }}}}",
                  "--user", f"{{{{ {_CHECKED}['user'] }}}}", "--run-id", "{{ run_id }}", "--dry-run", "false"],
        name="laketide-redo",
        action="redo",
        fatal_exit_codes={**FATAL_EXIT_CODES, 4: "another redo of the stream runs, or its writer did not stop"},
    )
    apply(checked) >> redo

    for _stream in _config.streams:
        _asset = closed_partitions_asset(_config, _stream)

        @task(task_id=f"reopened_{_stream.name}")
        def reopened(stream: str = _stream.name, **context: Any) -> list[str]:
            """The hours this redo recorded reopened that are decided now (complete or empty: none unless the redo
            was of this stream). A reopened hour that is still open (the live hour) closes on the close DAG's
            schedule, like any hour."""
            from laketide.redo.params import check_run_id
            from laketide.redo.plan import hours_to_reclose

            if context["params"].get("stream") != stream:
                return []
            return hours_to_reclose(airflow_config(), stream, check_run_id(context["run_id"]))

        @close_task(task_id=f"reclose_{_stream.name}", outlets=[_asset], max_active_tis_per_dagrun=4)
        def reclose(partition: str, stream: str = _stream.name, asset: Any = _asset,
                    **context: Any) -> dict[str, Any]:
            """Verify a reopened hour and close it again (an Asset event partitioned by the hour names it)."""
            from airflow.sdk.exceptions import AirflowException, AirflowFailException

            from laketide.airflow.assets import announce
            from laketide.close.closing import close, parse_hour, verify
            from laketide.errors import VerificationFailed

            config = airflow_config()
            cfg = config.stream(stream)
            try:
                verified = verify(config, cfg, parse_hour(partition), context["run_id"])
            except VerificationFailed as exc:  # retried only while landing files are still pending
                raise (AirflowException if exc.retryable else AirflowFailException)(str(exc)) from exc
            closed = close(config, cfg, verified, context["run_id"])
            announce(context["outlet_events"], asset, closed)
            return closed.to_dict()

        _hours = reopened()
        redo >> _hours
        _reclosed = reclose.expand(partition=_hours)
        if (_markers := _stream.done_markers) is not None:

            @task(task_id=f"done_markers_{_stream.name}", retries=_markers.retries, retry_delay=_markers.retry_delay,
                  max_active_tis_per_dagrun=4, on_failure_callback=alert, map_index_template="{{ closed_hour }}")
            def done_markers(closed: dict[str, Any], stream: str = _stream.name) -> list[str]:
                """The stream's done-markers for a re-closed hour (marker file, HTTP POST, callable); a failure is
                retried and alerted, the hour stays closed."""
                from airflow.sdk import get_current_context

                from laketide.airflow.markers import run_done_markers

                get_current_context()["closed_hour"] = closed["partition"]
                return run_done_markers(stream, closed)

            done_markers.expand(closed=_reclosed)

if __name__ == "__main__":
    redo_dag.test()
