"""Airflow Assets of laketide, defined once so that producers (the close DAG) and consumers agree.

An Asset event is emitted each time a partition of a stream's events table is closed (or re-closed after
late data, a redo or a backfill). The event is **partitioned**: its partition key is the hour
(``2026-11-22T03:00:00``, UTC, Airflow's default key format, :data:`laketide.lake.hours.AIRFLOW_KEY_FORMAT`),
so a consumer schedules with Airflow's partition idioms: ``PartitionedAssetTimetable`` with the default
(identity) mapper runs once per closed hour; with ``RollupMapper(upstream_mapper=StartOfDayMapper(),
window=DayWindow())`` once all 24 hours of a UTC day are closed. Its ``extra`` is the close record
(:class:`laketide.close.results.ClosedPartition`: table, partition, counts, snapshot, closed at, re-close).

Airflow 3.3 queues a partitioned event only for partition-aware consumers: a DAG scheduled on the plain asset
(``schedule=[asset]``) is not triggered by it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from laketide.config import LaketideConfig, StreamConfig

if TYPE_CHECKING:
    from airflow.sdk import Asset

    from laketide.close.results import ClosedPartition


def closed_partitions_asset(config: LaketideConfig, stream: StreamConfig) -> Asset:
    """The Asset updated whenever an hour of ``stream`` is closed: ``iceberg://<catalog>/<ns>/<table>``, named
    ``<catalog>.<ns>.<table>.closed_hours``. Airflow knows an asset by its name and its URI alike: both come from
    the catalog and the table, so two catalogs (another installation's, a test's) never claim one name."""
    from airflow.sdk import Asset

    namespace, table = stream.table.split(".")
    return Asset(
        name=f"{config.catalog.name}.{stream.table}.closed_hours",
        uri=f"iceberg://{config.catalog.name}/{namespace}/{table}",
        group="laketide",
        extra={"table": stream.table, "stream": stream.name},
    )


def announce(outlet_events: Any, asset: Asset, closed: ClosedPartition) -> str:
    """Emit the close of an hour on ``asset`` from the running task: one event partitioned by the hour's Airflow
    key, the close record as its extra. Returns the key."""
    from laketide.close.closing import airflow_key
    from laketide.lake.hours import parse_partition

    key = airflow_key(parse_partition(closed.partition))
    accessor = outlet_events[asset]
    accessor.extra = closed.to_dict()
    accessor.add_partitions(key)
    return key
