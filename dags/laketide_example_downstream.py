"""
### laketide example downstream: runs whenever an hour of `clicks` is closed

A consumer scheduled on the Asset the close DAG emits. The Asset event's extra names the table and the
partition, so the job reads exactly that closed hour (here: page views per country, from Iceberg with
pyiceberg) and never a half-written one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from laketide.airflow.assets import closed_partitions_asset
from laketide.airflow.hooks import airflow_config
from laketide.config import get_config

_config = get_config()
_stream = _config.streams[0]

with DAG(
    dag_id="laketide_example_downstream",
    description=f"Example consumer of closed hours of {_stream.table}",
    doc_md=__doc__,
    schedule=[closed_partitions_asset(_config, _stream)],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["laketide", "example"],
    default_args={"owner": "laketide", "retries": 1},
) as dag:

    @task
    def summarize_closed_hours(**context: Any) -> list[dict[str, Any]]:
        from laketide.airflow.downstream import hourly_summary
        from laketide.close.results import ClosedPartition

        out = []
        for events in context["triggering_asset_events"].values():
            for event in events:
                closed = ClosedPartition.from_dict(event.extra)
                out.append(hourly_summary(airflow_config(), closed.stream, closed.partition))
        return out

    summarize_closed_hours()

if __name__ == "__main__":
    dag.test()
