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
_DURATION = re.compile(r"^\s*([-+]?)\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_UNITS = {
    "": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
}
_EXAMPLES = "use e.g. '30s', '10 minutes', '1h'"


class Duration(timedelta):
    """A duration read from the configuration, which remembers how it was written (``7d``, ``10m``, ``90``): error
    messages quote it so. Arithmetic gives plain timedeltas; :func:`as_written` tells either kind."""

    text: str


def as_written(value: timedelta) -> str:
    """A duration as the configuration gave it (``7d``, ``60d``, ``10m``), or, for one computed or built in, in the
    largest unit that writes it whole (``86400 s`` -> ``1d``, ``90 s`` -> ``90s``)."""
    text = getattr(value, "text", None)
    if isinstance(text, str):
        return text
    micros = value // timedelta(microseconds=1)
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if micros and micros % (size * 1_000_000) == 0:
            return f"{sign}{micros // (size * 1_000_000)}{unit}"
    return f"{sign}{micros / 1_000_000:g}s"


def _shown(value: Any) -> str:
    """A configured value in a message: as written (a duration built in, as :func:`as_written` writes it)."""
    return repr(as_written(value) if isinstance(value, timedelta) else value)


def parse_duration(value: Any) -> timedelta:
    """Parse ``30s``, ``10 minutes``, ``1h``, ``2d``, ``-5m`` or a number of seconds into a timedelta (a
    :class:`Duration` that remembers the text, for messages)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds, text = float(value), f"{value:g}s"
    else:
        match = _DURATION.match(str(value).lower()) if isinstance(value, str) else None
        if not match or match.group(3) not in _UNITS:
            raise ValueError(f"not a duration: {value!r} ({_EXAMPLES})")
        seconds = float(match.group(2)) * _UNITS[match.group(3)] * (-1 if match.group(1) == "-" else 1)
        text = value.strip()
    if not math.isfinite(seconds):
        raise ValueError(f"not a duration: {value!r} ({_EXAMPLES})")
    try:
        duration = Duration(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {value!r} is out of range (at most {timedelta.max.days} days)") from None
    duration.text = text
    return duration


def positive_duration(value: Any) -> timedelta:
    """A duration above zero (a negative or zero interval, window or timeout is refused)."""
    duration = parse_duration(value)
    if duration <= timedelta(0):
        raise ValueError(f"must be a positive duration, not {_shown(value)} ({_EXAMPLES})")
    return duration


def non_negative_duration(value: Any) -> timedelta:
    """A duration of zero or more."""
    duration = parse_duration(value)
    if duration < timedelta(0):
        raise ValueError(f"must not be negative: {_shown(value)} (use 0 for none, or e.g. '10m')")
    return duration


def millis(value: timedelta) -> int:
    """A duration in whole milliseconds (file and commit times are kept in milliseconds since the epoch)."""
    return int(value.total_seconds() * 1000)


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
