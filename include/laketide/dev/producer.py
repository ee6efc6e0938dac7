"""Bundled sample producer: writes synthetic events of a configured stream into its landing zone.

Run ``python -m laketide.dev.producer --help`` (or ``laketide-produce --help``). Two modes:

* ``backfill`` - synthetic history: ``--hours`` hours from ``--start``, ``--events-per-hour`` each;
  deterministic given ``--seed`` and ``--start`` (file contents; the names carry a random token);
* ``live`` - events stamped about now at ``--rate`` events/s, a file per hour present in the buffer
  every ``--flush-seconds``, until ``--duration`` passes or SIGINT/SIGTERM (then it flushes and exits).

Both can inject faults: malformed lines (``--malformed-ratio``), late events (``--late-ratio``,
``--late-by``), quiet hours (backfill) and a pause (live). Files follow the landing-zone contract
(``docs/landing-zone.md``) and are published with :func:`laketide.ingest.landing.publish`.
The events themselves are made in :mod:`laketide.dev.events`, the command line is parsed in
:mod:`laketide.dev.producer_args`.

The generation logic is plain functions (:func:`make_event`, :func:`make_malformed`,
:func:`backfill`, :func:`live`) so tests and other tools can call them directly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from laketide.config import StreamConfig, get_config
from laketide.dev.events import (
    MALFORMED_KINDS,
    Faults,
    Line,
    _utcnow,
    encode_event,
    format_time,
    hour_floor,
    make_event,
    make_line,
    make_malformed,
    make_value,
)
from laketide.dev.producer_args import _check_mode_options, _default_producer_id, build_parser
from laketide.errors import LaketideError
from laketide.ingest import landing
from laketide.lake.hours import partition_key

log = logging.getLogger("laketide.dev.producer")

#: the event makers are part of this module's interface (tests and tools call ``producer.make_event``)
__all__ = [
    "MALFORMED_KINDS",
    "Faults",
    "Line",
    "ProduceSummary",
    "backfill",
    "build_parser",
    "encode_event",
    "format_time",
    "hour_floor",
    "live",
    "main",
    "make_event",
    "make_line",
    "make_malformed",
    "make_value",
]


# ---------------------------------------------------------------- files and summary


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
    quiet = frozenset(partition_key(start + timedelta(hours=h)) for h in quiet_hours)
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
        current = partition_key(hour_start)
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


# ---------------------------------------------------------------- command line (options: laketide.dev.producer_args)


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
