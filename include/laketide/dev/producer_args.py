"""The ``laketide-produce`` command line: its argument parser and the checks across options."""

from __future__ import annotations

import argparse
import re
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from laketide.config import parse_duration
from laketide.dev.events import hour_floor


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

