"""The partition-completion trigger: waits in the triggerer, reading metadata only (Iceberg snapshot summaries and
the landing zone's listing; no data file, no JVM)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from laketide.close.partitions import Cursor, PartitionStatus
from laketide.close.results import PartitionEvent


def check(config_path: str, stream: str, partition: str, cursor: dict[str, Any] | None,
          now: datetime | None = None, catalog: dict[str, Any] | None = None) -> tuple[PartitionStatus, Cursor]:
    """One blocking status check (run in a thread by the trigger, directly by the sensor).

    :param catalog: the catalog settings in force (``LaketideCatalogHook.catalog_config()``, resolved by the
        sensor on the worker), or None for the configuration file's
    """
    from laketide.close.closing import parse_hour
    from laketide.close.partitions import check_partition
    from laketide.config import CatalogConfig, get_config

    config = get_config(config_path)
    if catalog is not None:
        config = config.model_copy(update={"catalog": CatalogConfig.model_validate(catalog)})
    return check_partition(config, config.stream(stream), parse_hour(partition), now,
                           Cursor.from_dict(cursor) if cursor else None)


class PartitionCompletionTrigger(BaseTrigger):
    """Fires when a partition is decided: complete, empty or gap; or when ``deadline`` passes (timeout). The event's
    payload is a :class:`~laketide.close.results.PartitionEvent` (``to_dict()``).

    Each poll reads the snapshots committed since the previous poll (the cursor), the landing zone's listing and,
    for the backlog, the source positions of the newest commits (as far back as the landed files need), in a
    worker thread so the triggerer's event loop never blocks. Open and lagging partitions keep it waiting.

    :param config_path: the laketide configuration file (resolved by the sensor on the worker)
    :param stream: stream name
    :param partition: the hour, ISO with offset (``2026-11-22T03:00:00+00:00``)
    :param cursor: where the sensor's first check stopped (``Cursor.to_dict()``)
    :param catalog: the catalog settings (the ``laketide_catalog`` connection's, resolved by the sensor), or None
    :param poke_interval: seconds between polls
    :param deadline: ISO time after which the trigger gives up with a ``timeout`` event
    """

    def __init__(self, config_path: str, stream: str, partition: str, cursor: dict[str, Any] | None = None,
                 poke_interval: float = 60.0, deadline: str | None = None,
                 catalog: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.catalog = catalog
        self.config_path = config_path
        self.stream = stream
        self.partition = partition
        self.cursor = cursor
        self.poke_interval = poke_interval
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "config_path": self.config_path, "stream": self.stream, "partition": self.partition,
            "cursor": self.cursor, "poke_interval": self.poke_interval, "deadline": self.deadline,
            "catalog": self.catalog,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        cursor = self.cursor
        deadline = datetime.fromisoformat(self.deadline) if self.deadline else None
        while True:
            status, seen = await asyncio.to_thread(check, self.config_path, self.stream, self.partition, cursor,
                                                  None, self.catalog)
            cursor = seen.to_dict()
            if status.decided:
                yield TriggerEvent(PartitionEvent.from_status(status).to_dict())
                return
            self.log.info("partition %s of %s is %s: %s", self.partition, self.stream, status.state, status.reason)
            if deadline is not None and datetime.now(UTC) >= deadline:
                yield TriggerEvent(PartitionEvent.from_status(status, timeout=True).to_dict())
                return
            await asyncio.sleep(self.poke_interval)
