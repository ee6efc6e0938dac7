"""Values of a batch's snapshot summary, shared by both commit paths: partition keys, ISO times, the watermark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from laketide.ingest.landing import EPOCH, partition_key

MICROS_PER_HOUR = 3_600_000_000


def _utc(value: datetime) -> datetime:
    """PySpark hands timestamps back as naive local times; Python reads naive as local too."""
    return value.astimezone(UTC)


def summary_key(hour: datetime | None) -> str:
    """Partition key of an hour in summaries (``landing.partition_key``), or 'unknown'."""
    return "unknown" if hour is None else partition_key(_utc(hour))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else _utc(value).isoformat()


def _from_micros(value: Any) -> datetime | None:
    if value is None:
        return None
    return EPOCH + timedelta(microseconds=int(value))


def _later(*values: str | None) -> str | None:
    """The latest of ISO UTC timestamps written by ``_iso`` (same format, so text order is time order)."""
    present = [v for v in values if v]
    return max(present) if present else None
