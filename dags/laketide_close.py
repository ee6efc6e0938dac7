"""
### laketide close: declare an hour of a stream final, once it is verified

One DAG per configured stream, scheduled hourly; the run's data interval is the partition it closes.

1. **wait_for_partition**: a deferrable sensor decides from Iceberg metadata alone (in the triggerer) whether
   the hour is *complete*, *empty* (a real quiet hour), *lagging* (the writer is behind: keep waiting) or a
   *gap* (the stream stalled: the task fails and the alert callback runs; nothing is closed). An hour checked
   before the stream's writer has committed anything (a fresh start: no table yet) waits for the writer.
2. **verify**: Great Expectations checks audit count == lake + rejects, unique event ids, required columns
   not null, event times inside the hour. A failure names the numbers and leaves the hour unclosed.
3. **close**: records the hour as closed in the status table and emits an Asset event whose extra names the
   table and the partition: downstream DAGs schedule on it.

Every run also looks for closed hours that received late rows (**find_reopened**): each is recorded as
reopened, verified and closed again (**reclose**, one mapped task per hour), with a new Asset event.
Status: `python -m laketide.status` or the status table (`close.status_table`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, CronDataIntervalTimetable, task

from laketide.airflow.callbacks import alert
from laketide.airflow.sensors import PartitionCompletionSensor
from laketide.assets import closed_partitions_asset
from laketide.config import get_config

_config = get_config()


def _fail(exc: Exception) -> Exception:
    """Verification failures stop without retrying unless landing files are still pending."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    retryable = getattr(exc, "retryable", False)
    return (AirflowException if retryable else AirflowFailException)(str(exc))


for _stream in _config.streams:
    _asset = closed_partitions_asset(_config, _stream)
    with DAG(
        dag_id=f"laketide_close_{_stream.name}",
        description=f"Close hourly partitions of {_stream.table}: sensor -> verify -> record + Asset event",
        doc_md=__doc__,
        # a data interval per hour (Airflow 3's plain "@hourly" has a zero-length one): the hour to close
        # is [data_interval_start, data_interval_end), and its run starts when that hour has ended
        schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=4,
        tags=["laketide", "close", _stream.name],
        default_args={
            "owner": "laketide",
            "retries": 2,
            "retry_delay": timedelta(minutes=5),
            "on_failure_callback": alert,
        },
    ) as _dag:
        _name = _stream.name

        wait = PartitionCompletionSensor(
            task_id="wait_for_partition",
            stream=_name,
            partition="{{ data_interval_start }}",
            poke_interval=_config.close.poke_interval.total_seconds(),
            timeout=_config.close.sensor_timeout.total_seconds(),
        )

        @task
        def verify(decision: dict[str, Any], stream: str = _name, **context: Any) -> dict[str, Any]:
            from laketide.closing import VerificationFailed, parse_hour
            from laketide.closing import verify as verify_partition

            config = get_config()
            try:
                return verify_partition(config, config.stream(stream), parse_hour(decision["partition"]),
                                        context["run_id"], decision)
            except VerificationFailed as exc:
                raise _fail(exc) from exc

        @task(outlets=[_asset])
        def close(verified: dict[str, Any], stream: str = _name, asset: Any = _asset, **context: Any) -> None:
            from laketide.closing import close as close_partition

            config = get_config()
            extra = close_partition(config, config.stream(stream), verified, context["run_id"])
            context["outlet_events"][asset].extra = extra

        @task
        def find_reopened(stream: str = _name, **context: Any) -> list[str]:
            from laketide.closing import find_reopened as find

            config = get_config()
            return find(config, config.stream(stream), context["run_id"])

        @task(outlets=[_asset])
        def reclose(partition: str, stream: str = _name, asset: Any = _asset, **context: Any) -> None:
            from laketide.closing import VerificationFailed, close, parse_hour, verify

            config = get_config()
            cfg = config.stream(stream)
            try:
                verified = verify(config, cfg, parse_hour(partition), context["run_id"])
            except VerificationFailed as exc:
                raise _fail(exc) from exc
            context["outlet_events"][asset].extra = close(config, cfg, verified, context["run_id"])

        close(verify(wait.output))
        reclose.expand(partition=find_reopened())
    globals()[_dag.dag_id] = _dag

if __name__ == "__main__":
    for _name_ in list(globals()):
        if _name_.startswith("laketide_close_"):
            globals()[_name_].test()
