"""Values of a batch's snapshot summary, shared by both commit paths: partition keys, ISO times, the watermark."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from laketide.ingest.landing import FILE_NAME
from laketide.lake.hours import EPOCH, partition_key

if TYPE_CHECKING:
    from laketide.config import StreamConfig

log = logging.getLogger("laketide.ingest.writer")

MICROS_PER_HOUR = 3_600_000_000


def _utc(value: datetime) -> datetime:
    """PySpark hands timestamps back as naive local times; Python reads naive as local too."""
    return value.astimezone(UTC)


def summary_key(hour: datetime | None) -> str:
    """Partition key of an hour in summaries (``partition_key``), or 'unknown'."""
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


def watermark_after(previous: str | None, batch_max: datetime | None, now: datetime, skew: timedelta) -> str | None:
    """The writer's watermark after a batch: the later of ``previous`` and the batch's newest event time, the
    latter capped at the writer's clock (``now``) + ``max_clock_skew``.

    The cap is the rule that keeps one producer with a fast clock from closing hours early: its events are kept,
    but they move the stream's watermark no further than an on-time producer's would. A replay of history
    (events in the past) is never capped."""
    if batch_max is None:
        return previous
    return _later(previous, _iso(min(_utc(batch_max), _utc(now) + skew)))


def producer_of(file_name: str) -> str:
    """The producer a landing file names (``<hour>-<producer>-<seq>-<token>.jsonl``), else the file name."""
    match = FILE_NAME.match(file_name.lstrip("_."))
    return match.group("producer") if match else file_name


def ahead_of_clock(latest_by_file: Mapping[str, datetime], now: datetime, skew: timedelta) -> dict[str, str]:
    """``{producer: latest event time}`` of the files whose events ran more than ``skew`` ahead of ``now``."""
    limit = _utc(now) + skew
    out: dict[str, str] = {}
    for name, latest in latest_by_file.items():
        if _utc(latest) > limit:
            producer, when = producer_of(name), _iso(latest) or ""
            out[producer] = max(out.get(producer, when), when)
    return dict(sorted(out.items()))


def warn_ahead(stream: StreamConfig, batch_id: int, ahead: Mapping[str, str]) -> str | None:
    """Log the producers whose clock runs ahead (a warning naming each); their summary value (None: none)."""
    if not ahead:
        return None
    log.warning("batch %d of %s: producer clock ahead: %s sent events more than max_clock_skew (%s) ahead of the "
                "writer's clock; the rows are kept, the watermark goes no further than the clock + %s. Fix the "
                "producers' clocks (NTP).", batch_id, stream.name,
                ", ".join(f"{p} (events up to {t})" for p, t in ahead.items()), stream.max_clock_skew,
                stream.max_clock_skew)
    return json.dumps(dict(ahead), separators=(",", ":"))
