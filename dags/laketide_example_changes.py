"""
### laketide example: the changes of each closed hour of an upsert stream

A consumer of the closed-hours Asset of the first upsert stream (a stream with an `upsert` section: its table is the
change log, hour-partitioned by change time). One run per closed hour (`PartitionedAssetTimetable` with the default
identity mapper: the run's partition key is the hour, `2026-11-22T03:00:00`, UTC), and one more when the hour
re-closes (late changes, a redo).

Each run reads what changed in its hour since the hour's previous close, with pyiceberg: the change log's rows of
the hour at the close's snapshot that were not there at the previous close (the event's `snapshot_range`, from the
status table), counted by operation (inserts, updates, deletes) and by key. The merged table (one row per key) is
the current state; this is the way to follow what changed, hour by hour, never from a half-written hour.

Not there when no stream has an `upsert` section.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, PartitionedAssetTimetable, task

from laketide.airflow.assets import closed_partitions_asset
from laketide.airflow.hooks import airflow_config
from laketide.config import get_config

_config = get_config()
_stream = next((s for s in _config.streams if s.upsert is not None), None)

if _stream is not None:
    with DAG(
        dag_id="laketide_example_changes",
        description=f"Example consumer: the changes of each closed hour of {_stream.table}",
        doc_md=__doc__,
        schedule=PartitionedAssetTimetable(assets=closed_partitions_asset(_config, _stream)),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["laketide", "example"],
        default_args={"owner": "laketide", "retries": 1},
    ) as dag:

        @task
        def read_changes(stream: str = _stream.name, **context: Any) -> dict[str, Any]:
            from laketide.airflow.downstream import hour_changes, hour_of

            changes = hour_changes(airflow_config(), stream, hour_of(context["dag_run"].partition_key))
            print(f"hour {changes['hour']} of {stream}: {changes['changes']:,} change(s) since snapshot "
                  f"{changes['snapshot_range']['from'] or '(first close)'} -> {changes['snapshot_range']['to']}; "
                  f"by operation {changes.get('operations')}; {changes.get('keys')} key(s)", flush=True)
            return changes

        read_changes()

    if __name__ == "__main__":
        dag.test()
