"""Bundled sample producer: writes synthetic events of a configured stream into its landing zone.

Run ``python -m laketide.dev.producer --help`` (or ``laketide-produce --help``). Two modes:

* ``backfill`` - synthetic history: ``--hours`` hours from ``--start``, ``--events-per-hour`` each;
  deterministic given ``--seed`` and ``--start`` (file contents; the names carry a random token);
* ``live`` - events stamped about now at ``--rate`` events/s, a file per hour present in the buffer
  every ``--flush-seconds``, until ``--duration`` passes or SIGINT/SIGTERM (then it flushes and exits).

Both can inject faults: malformed lines (``--malformed-ratio``), late events (``--late-ratio``,
``--late-by``), quiet hours (backfill) and a pause (live). Files follow the landing-zone contract
(``docs/landing-zone.md``) and are published with :func:`laketide.ingest.landing.publish`.

The generation logic is plain functions (:func:`make_event`, :func:`make_malformed`,
:func:`backfill`, :func:`live`) so tests and other tools can call them directly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from laketide.config import StreamConfig, get_config, parse_duration
from laketide.errors import LaketideError
from laketide.ingest import landing

log = logging.getLogger("laketide.dev.producer")

#: every kind of bad line the producer can write (see :func:`make_malformed`)
MALFORMED_KINDS = (
    "not_json",
    "truncated_json",
    "wrong_type",
    "missing_required",
    "invalid_utf8",
    "absurd_time",
    "json_array",
)

PAGES = ("/home", "/search", "/product/{n}", "/cart", "/checkout", "/account", "/help", "/blog/{n}")
ACTIONS = ("view",) * 6 + ("click",) * 3 + ("purchase",)
COUNTRIES = ("US",) * 4 + ("DE",) * 2 + ("GB", "FR", "BR", "IN", "JP", "NL", "ES", "CA", "MX", "PL")
REFERRERS = ("google", "direct", "newsletter", "facebook", "partner", "bing")
DEVICES = ("desktop", "mobile", "mobile", "tablet")
BROWSERS = ("chrome", "safari", "firefox", "edge")
CURRENCIES = ("EUR", "USD", "GBP")
WORDS = ("alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango", "zulu")
NOT_JSON = (
    "this is not json",
    "<html><body><h1>502 Bad Gateway</h1></body></html>",
    "user_id=42&page=/home&action=view",
    "event_id,event_time,user_id,page",
    "undefined",
)
#: values of the wrong type per field type (all of them fail validation)
WRONG_VALUES: dict[str, tuple[Any, ...]] = {
    "long": ("abc", "12a", {"id": 7}),
    "int": ("abc", "seven", [1, 2]),
    "double": ("n/a", "1,5", {"value": 1}),
    "boolean": ("yes", "maybe", {"flag": 1}),
    "timestamp": ("yesterday", "not-a-time", {"ts": 1}),
}
#: non-ASCII words encoded as Latin-1: not valid UTF-8
LATIN1_WORDS = ("São Paulo", "café", "Zürich", "naïve")
_INT32_MAX = 2**31 - 1


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _ms(dt: datetime) -> datetime:
    """Truncate to milliseconds (timestamps look like ``2026-11-22T03:15:07.123000+00:00``)."""
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


def format_time(dt: datetime) -> str:
    """An event timestamp: ISO-8601 UTC with microseconds, e.g. ``2026-11-22T03:15:07.123000+00:00``."""
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def hour_floor(dt: datetime) -> datetime:
    """The UTC hour start of ``dt`` (naive means UTC)."""
    return datetime.fromisoformat(landing.partition_key(dt))


# ---------------------------------------------------------------- values and events


def make_value(name: str, field_type: str, rng: random.Random, event_time: datetime) -> Any:
    """A realistic-ish value for a field: field-name heuristics first, then a fallback by type."""
    lname = name.lower()
    if field_type == "string":
        if any(k in lname for k in ("page", "path", "url", "uri")):
            return rng.choice(PAGES).format(n=rng.randint(1, 500))
        if any(k in lname for k in ("action", "event_type", "verb", "kind")):
            return rng.choice(ACTIONS)
        if "country" in lname:
            return rng.choice(COUNTRIES)
        if "refer" in lname or lname in ("source", "utm_source", "channel"):
            return rng.choice(REFERRERS)
        if "device" in lname or "platform" in lname:
            return rng.choice(DEVICES)
        if "browser" in lname or "agent" in lname:
            return rng.choice(BROWSERS)
        if "currency" in lname:
            return rng.choice(CURRENCIES)
        if "email" in lname:
            return f"user{rng.randint(1, 100_000)}@example.com"
        if "user" in lname or "customer" in lname or "account" in lname:
            return f"u{rng.randint(1, 100_000):06d}"
        if lname.endswith("id"):
            return uuid.UUID(int=rng.getrandbits(128), version=4).hex
        return f"{rng.choice(WORDS)}-{rng.randint(1, 999)}"
    if field_type in ("long", "int"):
        if any(k in lname for k in ("duration", "latency", "elapsed", "_ms")):
            value = int(rng.lognormvariate(6.5, 1.0))
        elif any(k in lname for k in ("user", "customer", "account")):
            value = rng.randint(1, 100_000)
        elif any(k in lname for k in ("count", "qty", "quantity", "items")):
            value = rng.randint(1, 5)
        elif "status" in lname:
            value = rng.choice((200, 200, 200, 200, 204, 304, 404, 500))
        elif "age" in lname:
            value = rng.randint(18, 80)
        else:
            value = rng.randint(0, 10_000)
        return min(value, _INT32_MAX) if field_type == "int" else value
    if field_type == "double":
        if any(k in lname for k in ("price", "amount", "total", "revenue", "cost")):
            return round(rng.uniform(1, 250), 2)
        if lname.startswith("lat"):
            return round(rng.uniform(-60, 70), 5)
        if lname.startswith(("lon", "lng")):
            return round(rng.uniform(-180, 180), 5)
        if any(k in lname for k in ("score", "ratio", "rate", "prob")):
            return round(rng.random(), 4)
        return round(rng.uniform(0, 1000), 3)
    if field_type == "boolean":
        return rng.random() < (0.05 if "bot" in lname else 0.5)
    if field_type == "timestamp":
        return format_time(_ms(event_time - timedelta(seconds=rng.uniform(0, 3600))))
    raise ValueError(f"unknown field type {field_type!r} of field {name!r}")


def make_event(
    stream: StreamConfig, rng: random.Random, event_time: datetime, *, omit_ratio: float = 0.15
) -> dict[str, Any]:
    """A valid event of ``stream`` stamped ``event_time``.

    Required fields are always present; each optional field is omitted with probability ``omit_ratio``.
    The event id is a uuid4 hex drawn from ``rng`` (deterministic given the seed).
    """
    event: dict[str, Any] = {}
    for name, spec in stream.fields.items():
        if name == stream.event_id_field:
            event[name] = (
                uuid.UUID(int=rng.getrandbits(128), version=4).hex
                if spec.type == "string"
                else rng.randint(1, _INT32_MAX if spec.type == "int" else 2**62)
            )
        elif name == stream.event_time_field:
            event[name] = format_time(event_time)
        elif not spec.required and rng.random() < omit_ratio:
            continue
        else:
            event[name] = make_value(name, spec.type, rng, event_time)
    return event


def encode_event(event: Any) -> bytes:
    """One JSON line (without the newline), UTF-8."""
    return json.dumps(event, ensure_ascii=False).encode("utf-8")


def make_malformed(
    stream: StreamConfig, rng: random.Random, event_time: datetime, kind: str | None = None
) -> tuple[str, bytes]:
    """A bad line for ``stream``: returns ``(kind, raw_line)``; ``kind`` is one of MALFORMED_KINDS.

    * ``not_json`` - plain text, HTML, a query string, a CSV header;
    * ``truncated_json`` - a proper prefix of a valid event (an unterminated object);
    * ``wrong_type`` - a non-string field holding a string (``"user_id": "abc"``) or similar;
    * ``missing_required`` - a required field left out;
    * ``invalid_utf8`` - a string value encoded as Latin-1 (bytes that are not UTF-8);
    * ``absurd_time`` - the event time in 1970 or 2999;
    * ``json_array`` - a JSON array instead of an object.
    """
    kind = kind or rng.choice(MALFORMED_KINDS)
    if kind not in MALFORMED_KINDS:
        raise ValueError(f"unknown malformed kind {kind!r}; choose from {MALFORMED_KINDS}")
    event = make_event(stream, rng, event_time, omit_ratio=0.0)
    time_field = stream.event_time_field
    if kind == "not_json":
        return kind, rng.choice(NOT_JSON).encode("utf-8")
    if kind == "truncated_json":
        raw = encode_event(event)
        return kind, raw[: rng.randint(1, len(raw) - 1)].rstrip() or b"{"
    if kind == "wrong_type":
        # prefer non-string fields: a number in a string field may be coerced by a lenient reader
        candidates = [n for n, s in stream.fields.items() if s.type != "string"]
        name = rng.choice(candidates)  # never empty: the event time is a timestamp
        event[name] = rng.choice(WRONG_VALUES[stream.fields[name].type])
        return kind, encode_event(event)
    if kind == "missing_required":
        del event[rng.choice([n for n, s in stream.fields.items() if s.required])]
        return kind, encode_event(event)
    if kind == "invalid_utf8":
        strings = [n for n, s in stream.fields.items() if s.type == "string" and n != stream.event_id_field]
        marker = "\x00LATIN1\x00"
        if strings:
            name = rng.choice(strings)
            bad = rng.choice(LATIN1_WORDS).encode("latin-1")
        else:  # no free-text field: spoil the event time itself
            name = time_field
            bad = (event[time_field] + "\u00a0").encode("latin-1")
        event[name] = marker
        raw = encode_event(event)
        return kind, raw.replace(json.dumps(marker).encode("utf-8")[1:-1], bad)
    if kind == "absurd_time":
        year = rng.choice((1970, 2999))
        absurd = datetime(year, event_time.month, min(event_time.day, 28), event_time.hour, tzinfo=UTC)
        event[time_field] = format_time(absurd + timedelta(seconds=rng.randrange(3600)))
        return kind, encode_event(event)
    # json_array
    payload: Any = [event] if rng.random() < 0.5 else list(event.values())
    return kind, encode_event(payload)


# ---------------------------------------------------------------- lines, files, summary


@dataclass(frozen=True)
class Faults:
    """Fault and realism knobs shared by both modes."""

    #: fraction of lines that are bad (see :func:`make_malformed`)
    malformed_ratio: float = 0.0
    #: fraction of events stamped up to ``late_by`` earlier than their arrival time
    late_ratio: float = 0.0
    late_by: timedelta = timedelta(minutes=30)
    #: probability that a good event leaves out an optional field
    omit_ratio: float = 0.15

    def __post_init__(self) -> None:
        for name in ("malformed_ratio", "late_ratio", "omit_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.late_by < timedelta(0):
            raise ValueError(f"late_by must not be negative, got {self.late_by}")


@dataclass(frozen=True)
class Line:
    """One line to publish: its partition, raw bytes, malformed kind (None when good) and lateness."""

    partition: str
    raw: bytes
    malformed: str | None = None
    late: bool = False


def make_line(
    stream: StreamConfig,
    rng: random.Random,
    arrival: datetime,
    faults: Faults,
    *,
    earliest: datetime | None = None,
    quiet: frozenset[str] = frozenset(),
) -> Line:
    """One line arriving at ``arrival``: maybe late (stamped earlier), maybe malformed.

    A late event is not made late if its time would fall before ``earliest`` or into a quiet partition.
    The line's partition is the hour of the event time assigned here (also for malformed lines).
    """
    event_time, late = _ms(arrival), False
    if faults.late_ratio and faults.late_by and rng.random() < faults.late_ratio:
        late_ms = max(1, int(faults.late_by.total_seconds() * 1000))
        candidate = event_time - timedelta(milliseconds=rng.randint(1, late_ms))
        if (earliest is None or candidate >= earliest) and landing.partition_key(candidate) not in quiet:
            event_time, late = candidate, True
    if faults.malformed_ratio and rng.random() < faults.malformed_ratio:
        kind, raw = make_malformed(stream, rng, event_time)
        return Line(landing.partition_key(event_time), raw, kind, late)
    event = make_event(stream, rng, event_time, omit_ratio=faults.omit_ratio)
    return Line(landing.partition_key(event_time), encode_event(event), None, late)


@dataclass
class ProduceSummary:
    """What a run published."""

    stream: str
    producer_id: str
    landing_path: Path
    files: list[Path] = field(default_factory=list)
    records: int = 0
    malformed: int = 0
    late: int = 0
    malformed_kinds: dict[str, int] = field(default_factory=dict)
    #: records per partition key
    partitions: dict[str, int] = field(default_factory=dict)

    def add(self, path: Path, partition: str, lines: Sequence[Line]) -> None:
        """Account for one published file."""
        self.files.append(path)
        self.records += len(lines)
        self.partitions[partition] = self.partitions.get(partition, 0) + len(lines)
        for line in lines:
            self.late += line.late
            if line.malformed:
                self.malformed += 1
                self.malformed_kinds[line.malformed] = self.malformed_kinds.get(line.malformed, 0) + 1

    def one_line(self) -> str:
        """The one-line summary printed at the end of a run."""
        partitions = json.dumps(dict(sorted(self.partitions.items())), separators=(",", ":"))
        return (
            f"laketide-produce: stream={self.stream} producer={self.producer_id} files={len(self.files)} "
            f"records={self.records} malformed={self.malformed} late={self.late} "
            f"landing={self.landing_path} partitions={partitions}"
        )


def _chunks(lines: Sequence[Line], size: int) -> Iterator[Sequence[Line]]:
    for i in range(0, len(lines), size):
        yield lines[i : i + size]


class _Publisher:
    """Publishes lines of one partition in files of at most ``events_per_file`` lines."""

    def __init__(self, stream: str, landing_path: Path, producer_id: str, events_per_file: int) -> None:
        if events_per_file < 1:
            raise ValueError(f"events_per_file must be >= 1, got {events_per_file}")
        self.stream, self.landing_path, self.producer_id = stream, landing_path, producer_id
        self.events_per_file = events_per_file
        self.seq = landing.next_seq(landing_path, producer_id)
        self.summary = ProduceSummary(stream, producer_id, landing_path)

    def publish(self, partition: str, lines: Sequence[Line]) -> None:
        for chunk in _chunks(lines, self.events_per_file):
            raws = [ln.raw for ln in chunk]
            path = landing.publish(
                self.landing_path, raws, partition, self.producer_id, self.seq, self.stream
            )
            self.seq += 1
            self.summary.add(path, partition, chunk)
            log.debug("published %s (%d lines)", path.name, len(chunk))

    def publish_buffer(self, buffer: dict[str, list[Line]]) -> None:
        for partition in sorted(buffer):
            if buffer[partition]:
                self.publish(partition, buffer[partition])
        buffer.clear()


def _lines_by_partition(lines: Sequence[Line]) -> dict[str, list[Line]]:
    grouped: dict[str, list[Line]] = {}
    for line in lines:
        grouped.setdefault(line.partition, []).append(line)
    return grouped


# ---------------------------------------------------------------- modes


def backfill(
    stream: StreamConfig,
    *,
    start: datetime,
    hours: int,
    events_per_hour: int,
    events_per_file: int = 500,
    landing_path: str | Path | None = None,
    producer_id: str = "sample",
    faults: Faults | None = None,
    quiet_hours: Sequence[int] = (),
    seed: int | None = None,
    rate: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ProduceSummary:
    """Write ``hours`` hours of synthetic history starting at the hour-aligned UTC ``start``.

    Each hour gets ``events_per_hour`` events at random times within it (hours whose offset is in
    ``quiet_hours`` get none: no files). Late events are stamped up to ``faults.late_by`` before their
    arrival and go into files of their own (earlier) hour, published after the files of the hour they
    arrived in; they never fall before ``start`` or into a quiet hour. With ``rate`` the files are
    paced to that many events per second. Deterministic (file contents) given ``seed`` and ``start``.
    """
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    start = start.astimezone(UTC)
    if start != hour_floor(start):
        raise ValueError(f"start must be hour-aligned, got {start.isoformat()}")
    if hours < 0 or events_per_hour < 0:
        raise ValueError("hours and events_per_hour must not be negative")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    bad = [h for h in quiet_hours if not 0 <= h < hours]
    if bad:
        raise ValueError(f"quiet hours {bad} are outside 0..{hours - 1}")
    quiet = frozenset(landing.partition_key(start + timedelta(hours=h)) for h in quiet_hours)
    faults = faults or Faults()
    path = Path(landing_path or stream.landing_path)
    rng = random.Random(seed)
    publisher = _Publisher(stream.name, path, producer_id, events_per_file)
    t0 = time.monotonic()
    for offset in range(hours):
        if offset in quiet_hours:
            continue
        hour_start = start + timedelta(hours=offset)
        arrivals = sorted(rng.randrange(3_600_000) for _ in range(events_per_hour))
        lines = [
            make_line(
                stream, rng, hour_start + timedelta(milliseconds=ms), faults, earliest=start, quiet=quiet
            )
            for ms in arrivals
        ]
        current = landing.partition_key(hour_start)
        groups = _lines_by_partition(lines)
        # the hour's own files first, then late files for earlier hours (they arrive after newer data)
        for partition in sorted(groups, key=lambda p: (p != current, p)):
            for chunk in _chunks(groups[partition], events_per_file):
                publisher.publish(partition, chunk)
                if rate:
                    ahead = publisher.summary.records / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        sleep(ahead)
    return publisher.summary


def live(
    stream: StreamConfig,
    *,
    landing_path: str | Path | None = None,
    producer_id: str = "sample",
    rate: float = 20.0,
    flush_seconds: float = 5.0,
    duration: float | None = None,
    events_per_file: int = 500,
    faults: Faults | None = None,
    pause_after: float | None = None,
    pause_for: float = 0.0,
    seed: int | None = None,
    stop: threading.Event | None = None,
    clock: Callable[[], datetime] = _utcnow,
    tick: float = 0.05,
) -> ProduceSummary:
    """Write events stamped about now at ``rate`` events/s until ``duration`` seconds pass or ``stop`` is set.

    Every ``flush_seconds`` the buffer is published: one file per hour present (more if a partition
    holds over ``events_per_file`` lines). After ``pause_after`` seconds the producer flushes and
    writes nothing for ``pause_for`` seconds (a stream gap; counted in ``duration``), once. On stop the
    buffer is flushed before returning.
    """
    if rate <= 0 or flush_seconds <= 0:
        raise ValueError("rate and flush_seconds must be > 0")
    faults = faults or Faults()
    path = Path(landing_path or stream.landing_path)
    rng = random.Random(seed)
    stop = threading.Event() if stop is None else stop
    publisher = _Publisher(stream.name, path, producer_id, events_per_file)
    buffer: dict[str, list[Line]] = {}
    started = last_flush = active_since = time.monotonic()
    generated, paused = 0, False
    while not stop.is_set():
        now = time.monotonic()
        if duration is not None and now - started >= duration:
            break
        if pause_after is not None and not paused and now - started >= pause_after:
            publisher.publish_buffer(buffer)
            wait = pause_for if duration is None else min(pause_for, duration - (now - started))
            log.info("pausing for %.1fs (stream gap)", max(wait, 0.0))
            stop.wait(max(wait, 0.0))
            paused = True
            generated, active_since = 0, time.monotonic()
            last_flush = active_since
            continue
        due = int((now - active_since) * rate) - generated
        for _ in range(due):
            line = make_line(stream, rng, clock(), faults)
            buffer.setdefault(line.partition, []).append(line)
        generated += max(due, 0)
        if now - last_flush >= flush_seconds:
            publisher.publish_buffer(buffer)
            last_flush = now
        stop.wait(tick)
    publisher.publish_buffer(buffer)
    return publisher.summary


# ---------------------------------------------------------------- command line


def _default_producer_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_.-]+", "-", socket.gethostname()).strip("-.") or "local"
    return f"sample-{host}"


def _iso_start(text: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO datetime: {text!r} (e.g. 2026-11-22T00:00Z)") from None
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    if dt != hour_floor(dt):
        raise argparse.ArgumentTypeError(f"--start must be hour-aligned (minute=second=0): {text!r}")
    return dt


def _number(text: str, kind: type[float] | type[int], ok: Callable[[float], bool], rule: str) -> Any:
    """Parse an option value as ``kind`` and check it, with an argparse error naming the rule."""
    try:
        value = kind(text)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {rule}: {text!r}")
    return value


def _ratio(text: str) -> float:
    return float(_number(text, float, lambda v: 0.0 <= v <= 1.0, "between 0 and 1"))


def _positive(text: str) -> float:
    return float(_number(text, float, lambda v: v > 0, "> 0"))


def _count(text: str) -> int:
    return int(_number(text, int, lambda v: v >= 0, ">= 0"))


def _seconds(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _hour_list(text: str) -> list[int]:
    try:
        return sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected hour offsets like 2,5: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The ``laketide-produce`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="laketide-produce",
        description=(
            "Write synthetic events of a configured stream into its landing zone, following the\n"
            "landing-zone contract (docs/landing-zone.md): one-partition JSONL files in data/, each\n"
            "with an audit record in audit/, both published atomically through _tmp/."
        ),
        epilog=(
            "examples:\n"
            "  laketide-produce --mode backfill --start 2026-11-20T00:00Z --hours 48 "
            "--events-per-hour 1000 --seed 7\n"
            "  laketide-produce --mode backfill --hours 6 --malformed-ratio 0.02 --late-ratio 0.1 "
            "--late-by 30m --quiet-hours 2,3\n"
            "  laketide-produce --mode live --rate 50 --flush-seconds 5 --duration 10m\n"
            "  laketide-produce --mode live --pause-after 2m --pause-for 20m   # a stream gap\n"
            "durations accept 30s, 10m, 1h, 2d or plain seconds."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_argument_group("stream")
    where.add_argument(
        "--config", metavar="PATH", help="laketide.yaml (default: $LAKETIDE_CONFIG, else conf/laketide.yaml)"
    )
    where.add_argument("--stream", metavar="NAME", help="configured stream (default: the first one)")
    where.add_argument("--landing-path", metavar="DIR", help="override the stream's landing_path")
    where.add_argument(
        "--producer-id",
        metavar="ID",
        default=None,
        help="goes into file names and audits; letters, digits, '_', '.', '-' (default: sample-<hostname>)",
    )
    parser.add_argument("--mode", choices=("backfill", "live"), default="backfill", help="default: backfill")
    parser.add_argument(
        "--seed", type=int, default=None, help="random seed (backfill file contents are reproducible)"
    )
    parser.add_argument(
        "--events-per-file", type=int, default=500, metavar="K", help="max lines per data file (default 500)"
    )
    parser.add_argument(
        "--rate",
        type=_positive,
        default=None,
        metavar="EPS",
        help="events per second (live: default 20; backfill: default as fast as possible)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every published file to stderr")

    bf = parser.add_argument_group("backfill mode")
    bf.add_argument(
        "--start",
        type=_iso_start,
        default=None,
        metavar="ISO",
        help="first hour, hour-aligned, UTC if no offset (default: now floored to the hour minus --hours)",
    )
    bf.add_argument("--hours", type=_count, default=None, metavar="H", help="hours of history (default 24)")
    bf.add_argument(
        "--events-per-hour", type=_count, default=None, metavar="N", help="events per hour (default 600)"
    )
    bf.add_argument(
        "--quiet-hours",
        type=_hour_list,
        default=None,
        metavar="I,J",
        help="hour offsets (0-based from --start) with no events at all, hence no files",
    )

    lv = parser.add_argument_group("live mode")
    lv.add_argument(
        "--flush-seconds", type=_positive, default=None, metavar="S", help="publish the buffer every S s (5)"
    )
    lv.add_argument(
        "--duration",
        type=_seconds,
        default=None,
        metavar="DUR",
        help="stop after this long (default: until SIGINT/SIGTERM; the buffer is flushed on exit)",
    )
    lv.add_argument(
        "--pause-after", type=_seconds, default=None, metavar="DUR", help="after this long, stop writing..."
    )
    lv.add_argument(
        "--pause-for", type=_seconds, default=None, metavar="DUR", help="...for this long (a stream gap)"
    )

    faults = parser.add_argument_group("faults (both modes)")
    faults.add_argument(
        "--malformed-ratio",
        type=_ratio,
        default=0.0,
        metavar="F",
        help="fraction of bad lines: not JSON, truncated JSON, wrong type, missing required field, "
        "invalid UTF-8, absurd event time (1970/2999), JSON array (default 0)",
    )
    faults.add_argument(
        "--late-ratio", type=_ratio, default=0.0, metavar="F", help="fraction of late events (default 0)"
    )
    faults.add_argument(
        "--late-by",
        type=_duration,
        default=timedelta(minutes=30),
        metavar="DUR",
        help="late events are stamped up to this much before their arrival; they go into files of "
        "their own hour (default 30m)",
    )
    return parser


def _check_mode_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    backfill_only = ("start", "hours", "events_per_hour", "quiet_hours")
    live_only = ("flush_seconds", "duration", "pause_after", "pause_for")
    other = "live" if args.mode == "backfill" else "backfill"
    wrong = live_only if args.mode == "backfill" else backfill_only
    given = ["--" + key.replace("_", "-") for key in wrong if getattr(args, key) is not None]
    if given:
        parser.error(f"{', '.join(given)} only apply to --mode {other}")
    if (args.pause_after is None) != (args.pause_for is None):
        parser.error("--pause-after and --pause-for go together")
    if args.events_per_file < 1:
        parser.error("--events-per-file must be >= 1")
    if args.producer_id is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", args.producer_id):
        parser.error(f"--producer-id {args.producer_id!r} may only hold letters, digits, '_', '.', '-'")
    if args.quiet_hours and args.hours is not None:
        outside = [h for h in args.quiet_hours if h >= args.hours]
        if outside:
            parser.error(f"--quiet-hours {outside} are outside 0..{args.hours - 1}")


def _run_live(stream: StreamConfig, args: argparse.Namespace, common: dict[str, Any]) -> ProduceSummary:
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: flushing and exiting", signal.Signals(signum).name)
        stop.set()

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: rely on --duration
            previous[sig] = signal.signal(sig, _on_signal)
    log.info("live: %s events/s; stop with Ctrl-C or SIGTERM (the buffer is flushed)", args.rate or 20.0)
    try:
        return live(
            stream,
            rate=args.rate or 20.0,
            flush_seconds=args.flush_seconds or 5.0,
            duration=args.duration,
            pause_after=args.pause_after,
            pause_for=args.pause_for or 0.0,
            stop=stop,
            **common,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (``laketide-produce`` / ``python -m laketide.dev.producer``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_mode_options(parser, args)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = get_config(args.config)
        if args.stream:
            stream = config.stream(args.stream)
        elif config.streams:
            stream = config.streams[0]
        else:
            raise LaketideError("no streams are configured")
    except LaketideError as exc:
        print(f"laketide-produce: {exc}", file=sys.stderr)
        return 2
    common: dict[str, Any] = {
        "landing_path": Path(args.landing_path) if args.landing_path else stream.landing_path,
        "producer_id": args.producer_id or _default_producer_id(),
        "events_per_file": args.events_per_file,
        "faults": Faults(args.malformed_ratio, args.late_ratio, args.late_by),
        "seed": args.seed,
    }
    log.info(
        "producing %s into %s (mode %s, producer %s)",
        stream.name, common["landing_path"], args.mode, common["producer_id"],
    )
    try:
        if args.mode == "backfill":
            hours = 24 if args.hours is None else args.hours
            start = args.start or hour_floor(_utcnow()) - timedelta(hours=hours)
            summary = backfill(
                stream,
                start=start,
                hours=hours,
                events_per_hour=600 if args.events_per_hour is None else args.events_per_hour,
                quiet_hours=args.quiet_hours or (),
                rate=args.rate,
                **common,
            )
        else:
            summary = _run_live(stream, args, common)
    except (OSError, ValueError) as exc:
        print(f"laketide-produce: {exc}", file=sys.stderr)
        return 1
    print(summary.one_line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
