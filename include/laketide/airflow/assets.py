"""Airflow Assets of laketide, defined once so that producers (the close DAG) and consumers agree.

An Asset event is emitted each time a partition of a stream's events table is closed (or re-closed after
late data); its ``extra`` names the table and the partition (see ``laketide.close.closing.close_extra``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laketide.config import LaketideConfig, StreamConfig

if TYPE_CHECKING:
    from airflow.sdk import Asset


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
