"""
### laketide example downstream: a daily rollup, once all 24 hours of a day are closed

A consumer of the closed-hours Asset the close DAG emits, scheduled with Airflow's own partition idioms: the
close's events are partitioned by hour (`2026-11-22T03:00:00`, UTC), and this DAG's `PartitionedAssetTimetable`
rolls them up per UTC day (`RollupMapper` with `StartOfDayMapper` and `DayWindow`, waiting for all 24 hours:
`WaitForAll`). Each run's partition key is its day (`2026-11-22`): the run reads that day's closed rows (page
views per country, from Iceberg with pyiceberg, never a half-written hour) and says which day it summarised.

A day whose hours are not all closed waits (the DAG's partition view shows how many have arrived). An hour that
re-closes after its day was summarised (late rows, a redo) starts a new wait for that day that fires only when
all 24 hours are announced again (a redo of the whole day); to summarise the day again at once, clear its run.
A per-hour consumer uses `PartitionedAssetTimetable(assets=<the asset>)` (the default identity mapper): one run
per closed (or re-closed) hour.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, DayWindow, PartitionedAssetTimetable, RollupMapper, StartOfDayMapper, WaitForAll, task

from laketide.airflow.assets import closed_partitions_asset
from laketide.airflow.hooks import airflow_config
from laketide.config import get_config

_config = get_config()
_stream = _config.streams[0]

with DAG(
    dag_id="laketide_example_downstream",
    description=f"Example consumer: a daily summary of {_stream.table} once all 24 hours of a day are closed",
    doc_md=__doc__,
    schedule=PartitionedAssetTimetable(
        assets=closed_partitions_asset(_config, _stream),
        # hourly keys (%Y-%m-%dT%H:%M:%S, UTC) -> the day (%Y-%m-%d); the run waits for every hour of the day
        default_partition_mapper=RollupMapper(upstream_mapper=StartOfDayMapper(), window=DayWindow(),
                                              wait_policy=WaitForAll()),
    ),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["laketide", "example"],
    default_args={"owner": "laketide", "retries": 1},
) as dag:

    @task
    def summarize_closed_day(stream: str = _stream.name, **context: Any) -> dict[str, Any]:
        from laketide.airflow.downstream import daily_summary, day_of

        day = day_of(context["dag_run"].partition_key)
        summary = daily_summary(airflow_config(), stream, day)
        print(f"summarised day {summary['day']} of {stream}: {summary['rows']:,} rows in {summary['hours']} "
              f"closed hours; top countries {summary['top_countries']}", flush=True)
        return summary

    summarize_closed_day()

if __name__ == "__main__":
    dag.test()
