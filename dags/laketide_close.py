"""
### laketide close: declare hours of a stream final, once they are verified

One DAG per configured stream, scheduled hourly; each run closes one hour, and says which in Airflow's own
terms: its **partition key** is the hour (`2026-11-22T03:00:00`, UTC). A scheduled run starts when its hour has
ended (the run at 04:00 closes 03:00); `airflow backfill create --dag-id laketide_close_<stream> --from-date ...
--to-date ...` makes one run per hour of the range (both ends included); a run triggered with a partition key
closes that hour; a manual run with **start** and **end** closes that range of past hours ("close range"); a
manual run with neither closes the last hour that ended before its logical date.

1. **plan**: the hours of the run (a range: whole UTC hours, start before end, end not in the future, at most
   `close.max_range_hours` hours; a bad range or partition key fails here and changes nothing).
2. **decide_ready** (a range): the hours decided already, from the first one on (complete or empty), close at
   once in **close_ready** while the rest of the range waits: one task verifies them all (a task process each
   would cost more than the work), then each is closed (and announced, its done-markers fired) as below.
3. **wait_for_partition**: a deferrable sensor decides the last of the hours from metadata alone (in the
   triggerer): *complete*, *empty* (a real quiet hour), *lagging* (landed files of the hour or earlier are not
   committed yet: keep waiting) or a *gap* (a live stream stalled: the task fails and the alert callback runs;
   nothing is closed). An hour checked before the stream's writer has committed anything waits for the writer.
4. **decide**: the hours between, checked in event-time order (they are decided once the last one is).
5. **close_hour** (one mapped group per hour): **verify** (Great Expectations: audit count == lake + rejects,
   unique event ids, required columns not null, event times inside the hour; a failure names the numbers and
   leaves the hour unclosed), then **close** (records the hour closed and emits an Asset event partitioned by
   the hour, its extra the close record: downstream DAGs schedule on it per hour or as a daily rollup), then
   **done_markers** when the stream configures them (marker file, HTTP POST, callable; retried on its own and
   alerted when it keeps failing: the hour stays closed).

Every run also looks for closed hours that received late rows (**find_reopened**): each is recorded as
reopened, verified and closed again (**reclose**, one mapped task per hour, then its done-markers), with a new
Asset event for the hour; an hour the run closes itself is verified once, by the run.
Last, **note** sets the run's note (e.g. `hour 2026-11-22 19:00: closed, complete, 21,690 rows`) through
Airflow's REST API (connection `laketide_airflow_api`); it runs whatever happened before it and never changes
the run's state. Status: `./laketide status` or the status table.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, CronPartitionTimetable, Param, task, task_group, teardown

from laketide.airflow.assets import closed_partitions_asset
from laketide.airflow.callbacks import alert
from laketide.airflow.close_task import close_task
from laketide.airflow.hooks import airflow_config
from laketide.airflow.sensors import PartitionCompletionSensor
from laketide.airflow.timetables import ReplayHours
from laketide.airflow.timing import timed
from laketide.config import get_config
from laketide.lake.hours import AIRFLOW_KEY_FORMAT

_config = get_config()


def _fail(exc: Exception) -> Exception:
    """Verification failures stop without retrying unless landing files are still pending."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    retryable = getattr(exc, "retryable", False)
    return (AirflowException if retryable else AirflowFailException)(str(exc))


for _stream in _config.streams:
    _asset = closed_partitions_asset(_config, _stream)
    _markers = _stream.done_markers
    with DAG(
        dag_id=f"laketide_close_{_stream.name}",
        description=f"Close hourly partitions of {_stream.table}: sensor -> verify -> record + Asset event",
        doc_md=__doc__,
        # one run per hour, its partition key the hour it closes: the run at the cron tick closes the hour before
        # it (run_offset=-1), a backfill the hours of its range (the key of each hour is the hour itself); a replayed
        # stream (live: false) gets no scheduled runs, its hours close by backfill or close range
        schedule=(CronPartitionTimetable if _stream.live else ReplayHours)(
            "0 * * * *", timezone="UTC", run_offset=-1, key_format=AIRFLOW_KEY_FORMAT),
        # no hour before the stream's earliest accepted event time can hold rows: backfills may reach back to it
        start_date=datetime.fromisoformat(_stream.min_event_time),
        catchup=False,
        max_active_runs=4,
        tags=["laketide", "close", _stream.name],
        default_args={
            "owner": "laketide",
            "retries": 2,
            "retry_delay": timedelta(minutes=5),
            "on_failure_callback": alert,
        },
        params={
            "start": Param(
                None, type=["null", "string"], format="date-time", title="Close range: start",
                description="First hour to close, a UTC hour start (e.g. 2012-03-05T00:00:00+00:00). Leave both "
                            "empty to close the run's partition (or the last hour before its logical date).",
            ),
            "end": Param(
                None, type=["null", "string"], format="date-time", title="Close range: end",
                description=f"End of the range, exclusive (the first hour not closed); not in the future; at most "
                            f"{_config.close.max_range_hours} hours after start.",
            ),
        },
    ) as _dag:
        _name = _stream.name

        @task
        @timed
        def plan(stream: str = _name, **context: Any) -> list[str]:
            from datetime import UTC

            from airflow.sdk.exceptions import AirflowFailException

            from laketide.close.closing import run_hours
            from laketide.errors import RangeError
            from laketide.lake.hours import partition_key

            run = context["dag_run"]
            try:
                hours = run_hours(context["params"], run.partition_key, run.logical_date or run.run_after,
                                  datetime.now(UTC), airflow_config().close.max_range_hours)
            except RangeError as exc:
                raise AirflowFailException(f"close of {stream}: {exc}") from exc
            return [partition_key(h) for h in hours]

        hours = plan()
        wait = PartitionCompletionSensor(
            task_id="wait_for_partition",
            stream=_name,
            partition="{{ ti.xcom_pull(task_ids='plan')[-1] }}",
            poke_interval=_config.close.poke_interval.total_seconds(),
            timeout=_config.close.sensor_timeout.total_seconds(),
        )

        hours >> wait

        @task
        @timed
        def decide_ready(keys: list[str], stream: str = _name) -> list[dict[str, Any]]:
            from laketide.close.closing import decided_prefix

            config = airflow_config()
            return [d.to_dict() for d in decided_prefix(config, config.stream(stream), keys)]

        @task
        @timed
        def decide(keys: list[str], last: dict[str, Any], ready: list[dict[str, Any]],
                   stream: str = _name) -> list[dict[str, Any]]:
            from laketide.close.closing import decide_range
            from laketide.close.results import PartitionEvent

            config = airflow_config()
            decisions = decide_range(config, config.stream(stream), keys, PartitionEvent.from_dict(last),
                                     closed=len(ready))
            return [d.to_dict() for d in decisions]

        @task(max_active_tis_per_dagrun=4)
        @timed
        def verify(decision: dict[str, Any], stream: str = _name, **context: Any) -> dict[str, Any]:
            from laketide.close.closing import parse_hour
            from laketide.close.closing import verify as verify_partition
            from laketide.close.results import PartitionEvent
            from laketide.errors import VerificationFailed

            config = airflow_config()
            event = PartitionEvent.from_dict(decision)
            try:
                verified = verify_partition(config, config.stream(stream), parse_hour(event.partition),
                                            context["run_id"], event)
            except VerificationFailed as exc:
                raise _fail(exc) from exc
            return verified.to_dict()

        @close_task(outlets=[_asset])
        @timed
        def close(verified: dict[str, Any], stream: str = _name, asset: Any = _asset,
                  **context: Any) -> dict[str, Any]:
            from laketide.airflow.assets import announce
            from laketide.close.closing import close as close_partition
            from laketide.close.results import VerifiedPartition

            config = airflow_config()
            closed = close_partition(config, config.stream(stream), VerifiedPartition.from_dict(verified),
                                     context["run_id"])
            announce(context["outlet_events"], asset, closed)
            return closed.to_dict()

        @task(retries=_markers.retries if _markers else 0,
              retry_delay=_markers.retry_delay if _markers else timedelta(minutes=2),
              max_active_tis_per_dagrun=4, map_index_template="{{ closed_hour }}")
        @timed
        def done_markers(closed: dict[str, Any], stream: str = _name) -> list[str]:
            """The stream's done-markers for a closed (or re-closed) hour: marker file, HTTP POST, callable."""
            from airflow.sdk import get_current_context

            from laketide.airflow.markers import run_done_markers

            get_current_context()["closed_hour"] = closed["partition"]
            return run_done_markers(stream, closed)

        @task
        @timed
        def find_reopened(keys: list[str], stream: str = _name, **context: Any) -> list[str]:
            from laketide.close.closing import find_reopened as find

            config = airflow_config()
            return find(config, config.stream(stream), context["run_id"], closing=keys)

        @close_task(outlets=[_asset])
        @timed
        def reclose(partition: str, stream: str = _name, asset: Any = _asset, **context: Any) -> dict[str, Any]:
            from laketide.airflow.assets import announce
            from laketide.close.closing import close, parse_hour, verify
            from laketide.errors import VerificationFailed

            config = airflow_config()
            cfg = config.stream(stream)
            try:
                verified = verify(config, cfg, parse_hour(partition), context["run_id"])
            except VerificationFailed as exc:
                raise _fail(exc) from exc
            closed = close(config, cfg, verified, context["run_id"])
            announce(context["outlet_events"], asset, closed)
            return closed.to_dict()

        @task(max_active_tis_per_dagrun=4)
        @timed
        def verify_ready(decisions: list[dict[str, Any]], stream: str = _name,
                         **context: Any) -> list[dict[str, Any]]:
            """verify, for every hour a range found ready (one task: laketide.close.batches)."""
            from airflow.sdk.exceptions import AirflowException, AirflowFailException

            from laketide.close.batches import failures, verify_batch

            config = airflow_config()
            result = verify_batch(config, config.stream(stream), decisions, context["run_id"])
            failed = failures(result)
            if failed:
                raise (AirflowException if failed[1] else AirflowFailException)(f"close of {stream}: {failed[0]}")
            return result["verified"]

        @task_group
        def close_ready(decisions: list[dict[str, Any]]) -> None:
            closed = close.expand(verified=verify_ready.override(task_id="verify")(decisions))
            if _markers:  # noqa: B023 (the group is built in this iteration of the loop)
                done_markers.expand(closed=closed)

        @task_group
        def close_hour(decision: dict[str, Any]) -> None:
            closed = close(verify(decision))
            if _markers:  # noqa: B023 (the group is built in this iteration of the loop)
                done_markers(closed)

        @teardown
        @timed
        def note(stream: str = _name, **context: Any) -> str:
            """The run's note: the hours it closed and the outcome (set through Airflow's REST API)."""
            from laketide.airflow.notes import close_run_note

            return close_run_note(airflow_config(), stream, context)

        ready = decide_ready(hours)
        closing = [close_ready(ready),
                   close_hour.expand(decision=decide(hours, wait.output, ready))]
        reclosed = reclose.expand(partition=find_reopened(hours))
        if _markers:
            reclosed = done_markers.override(task_id="reclose_done_markers").expand(closed=reclosed)
        [*closing, reclosed] >> note()
    globals()[_dag.dag_id] = _dag

if __name__ == "__main__":
    for _name_ in list(globals()):
        if _name_.startswith("laketide_close_"):
            globals()[_name_].test()
