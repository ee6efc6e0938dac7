"""Value types of the configuration: durations, sizes, paths and table names, and the strict model base."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_UNITS = {
    "": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
}


def parse_duration(value: Any) -> timedelta:
    """Parse ``30s``, ``10 minutes``, ``1h``, ``2d`` or a number of seconds into a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value).lower())
        if not match or match.group(2) not in _UNITS:
            raise ValueError(f"not a duration: {value!r} (use e.g. '30s', '10 minutes', '1h')")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"not a duration: {value!r} (use e.g. '30s', '10 minutes', '1h')")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {value!r} is out of range (at most {timedelta.max.days} days)") from None


def positive_duration(value: Any) -> timedelta:
    """A duration above zero (a negative or zero interval, window or timeout is refused)."""
    duration = parse_duration(value)
    if duration <= timedelta(0):
        raise ValueError(f"must be a positive duration, not {value!r} (use e.g. '30s', '10 minutes', '1h')")
    return duration


def non_negative_duration(value: Any) -> timedelta:
    """A duration of zero or more."""
    duration = parse_duration(value)
    if duration < timedelta(0):
        raise ValueError(f"must not be negative: {value!r} (use 0 for none, or e.g. '10m')")
    return duration


def millis(value: timedelta) -> int:
    """A duration in whole milliseconds (file and commit times are kept in milliseconds since the epoch)."""
    return int(value.total_seconds() * 1000)


def _secs(value: timedelta) -> str:
    return f"{value.total_seconds():g}s"


def _absolute(value: Path) -> Path:
    if not value.is_absolute():
        raise ValueError(f"{str(value)!r} is a relative path: the Spark jobs and Airflow workers run from other "
                         "folders; use an absolute path or '{home}/...'")
    return value


def _local_path(location: str) -> Path | None:
    """The local folder of a warehouse location (``file://...`` or a plain path), None for remote storage."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") and not parsed.netloc:
        path = Path(unquote(parsed.path))
        return path if path.is_absolute() else None
    return None


def _inside(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or lies under it (symbolic links resolved as far as they exist)."""
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def check_table_name(value: str) -> str:
    """``namespace.table`` with plain identifiers (they reach SQL: nothing else is accepted)."""
    parts = value.split(".")
    if len(parts) != 2 or not all(_IDENT.fullmatch(p) for p in parts):
        raise ValueError(f"{value!r} must be 'namespace.table' with plain identifiers")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$")
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
               "g": 1024**3, "gb": 1024**3, "gib": 1024**3}


def parse_size(value: Any) -> int:
    """``134217728``, ``128MB``, ``512k`` or ``1g`` as bytes (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(str(value).lower())
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. '128MB', '512KB' or a number of bytes)")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2) or ""]
