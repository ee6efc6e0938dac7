"""Synthetic events of a configured stream for the sample producer: good ones, late ones and every kind of
bad line (:data:`MALFORMED_KINDS`). Plain functions of a seeded ``random.Random``, so tests call them directly.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from laketide.config import StreamConfig
from laketide.config.upsert import OPERATION_KINDS
from laketide.lake.hours import partition_key

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
#: an upsert stream's sample changes: keys drawn from this many, and the weights of their operations
CHANGE_KEYS = 500
CHANGE_KINDS = {"update": 0.75, "insert": 0.15, "delete": 0.10}
STATUSES = ("active",) * 6 + ("frozen", "closed")


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
    return datetime.fromisoformat(partition_key(dt))


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
        if "status" in lname or "state" in lname:
            return rng.choice(STATUSES)
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
    if stream.upsert is not None:
        _as_change(event, stream, rng, event_time)
    return event


def _as_change(event: dict[str, Any], stream: StreamConfig, rng: random.Random, event_time: datetime) -> None:
    """Make ``event`` a change of an upsert stream: its key drawn from :data:`CHANGE_KEYS` keys, its operation by
    :data:`CHANGE_KINDS` (as the operation field's ``values`` spell it), its sequence the change time in microseconds
    (a late change is older than the ones that arrived before it: the merge drops it when they touched its key)."""
    upsert = stream.upsert
    assert upsert is not None
    key = rng.randrange(CHANGE_KEYS)
    for name in upsert.primary_key:
        kind = stream.fields[name].type
        event[name] = f"acct-{key:04d}" if kind == "string" else key
    allowed = stream.fields[upsert.operation_field].values
    wanted = rng.choices(list(CHANGE_KINDS), weights=list(CHANGE_KINDS.values()))[0]
    spelled = [v for v in (allowed or ()) if OPERATION_KINDS.get(v) == wanted]
    event[upsert.operation_field] = spelled[0] if spelled else wanted
    micros = int(event_time.timestamp() * 1_000_000) + rng.randrange(1000)
    sequence = stream.fields[upsert.sequence_field].type
    event[upsert.sequence_field] = (format_time(event_time) if sequence == "timestamp"
                                    else micros if sequence == "long" else int(event_time.timestamp()))


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


# ---------------------------------------------------------------- lines: faults and lateness


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
        if (earliest is None or candidate >= earliest) and partition_key(candidate) not in quiet:
            event_time, late = candidate, True
    if faults.malformed_ratio and rng.random() < faults.malformed_ratio:
        kind, raw = make_malformed(stream, rng, event_time)
        return Line(partition_key(event_time), raw, kind, late)
    event = make_event(stream, rng, event_time, omit_ratio=faults.omit_ratio)
    return Line(partition_key(event_time), encode_event(event), None, late)
