"""The landing-zone contract: where producers publish files and how their audit records look.

A stream with ``landing_path`` L uses three folders (see ``docs/landing-zone.md``):

* ``L/_tmp/``  - files being written; never read by anyone;
* ``L/audit/`` - one JSON audit record ``X.json`` per data file ``X.jsonl``;
* ``L/data/``  - published newline-delimited JSON files ``X.jsonl``, one event per line.

A file is written fully into ``_tmp/`` and then renamed (atomic on one filesystem). The audit record
is renamed into ``audit/`` *before* its data file is renamed into ``data/``, so every visible data file
has its audit record. Each data file holds the events of exactly one partition (UTC hour).

Stdlib only: producers and Airflow tasks import this without Spark.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AUDIT_VERSION = 1
DATA_SUFFIX = ".jsonl"
AUDIT_SUFFIX = ".json"
#: ``<YYYYmmddTHH>-<producer_id>-<seq:08d>-<uuid8>.jsonl``
FILE_NAME = re.compile(
    r"^(?P<hour>\d{8}T\d{2})-(?P<producer>[A-Za-z0-9_.-]+)-(?P<seq>\d{8,})-(?P<token>[0-9a-f]{8})\.jsonl$"
)
_PRODUCER_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_AUDIT_KEYS = ("version", "stream", "file", "producer", "records", "partitions", "produced_at")


def partition_key(dt: datetime) -> str:
    """The partition of an event time: its UTC hour start, e.g. ``2026-11-22T03:00:00+00:00``.

    A naive datetime is taken to be UTC already.
    """
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).replace(minute=0, second=0, microsecond=0).isoformat()


#: the period of a partition
HOUR = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_epoch_hours(hours: int) -> datetime:
    """The hour start of an Iceberg ``hours`` transform value (hours since the Unix epoch)."""
    return EPOCH + hours * HOUR


def hour_start(value: datetime) -> datetime:
    """``value`` as a partition start: a timezone-aware datetime at a UTC hour start, returned in UTC.

    :raises ValueError: naive, or not the start of an hour
    """
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"partition must be a timezone-aware datetime (a UTC hour start), got {value!r}")
    start = value.astimezone(UTC)
    if start != start.replace(minute=0, second=0, microsecond=0):
        raise ValueError(f"partition {start.isoformat()} is not the start of an hour (a UTC hour start)")
    return start


def parse_partition(partition: str) -> datetime:
    """Parse a partition key back into an aware UTC datetime; raise ValueError if it is not canonical."""
    try:
        dt = datetime.fromisoformat(partition)
    except (TypeError, ValueError):
        raise ValueError(
            f"not a partition key: {partition!r} (expected e.g. '2026-11-22T03:00:00+00:00')"
        ) from None
    if dt.tzinfo is None or partition_key(dt) != partition:
        raise ValueError(
            f"not a partition key: {partition!r} (must be a UTC hour start written exactly like "
            "'2026-11-22T03:00:00+00:00')"
        )
    return dt


def data_dir(landing_path: str | Path) -> Path:
    """Where published data files (``*.jsonl``) live: ``L/data``."""
    return Path(landing_path) / "data"


def published_files(landing_path: str | Path) -> set[str]:
    """Names of the data files in ``L/data`` (``*.jsonl``; hidden names too, which the writer never reads)."""
    return {p.name for p in data_dir(landing_path).glob(f"*{DATA_SUFFIX}")}


def audit_dir(landing_path: str | Path) -> Path:
    """Where audit records (``*.json``, one per data file) live: ``L/audit``."""
    return Path(landing_path) / "audit"


def tmp_dir(landing_path: str | Path) -> Path:
    """Where files are written before being renamed into place: ``L/_tmp``."""
    return Path(landing_path) / "_tmp"


def audit_name(data_file_name: str) -> str:
    """The audit record's file name for a data file name: ``X.jsonl`` -> ``X.json``."""
    if not data_file_name.endswith(DATA_SUFFIX):
        raise ValueError(f"data file names end with {DATA_SUFFIX}: {data_file_name!r}")
    return data_file_name[: -len(DATA_SUFFIX)] + AUDIT_SUFFIX


def next_seq(landing_path: str | Path, producer_id: str) -> int:
    """The next free sequence number of a producer, from the files already in ``data/`` and ``audit/``."""
    highest = -1
    for folder in (data_dir(landing_path), audit_dir(landing_path)):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            name = path.name
            if name.endswith(AUDIT_SUFFIX):
                name = name[: -len(AUDIT_SUFFIX)] + DATA_SUFFIX
            match = FILE_NAME.match(name)
            if match and match.group("producer") == producer_id:
                highest = max(highest, int(match.group("seq")))
    return highest + 1


def _as_bytes(line: bytes | str) -> bytes:
    raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if b"\n" in raw or b"\r" in raw:
        raise ValueError(f"a record may not contain a line break: {raw[:80]!r}")
    if not raw.strip():
        raise ValueError("blank lines are not records; do not publish them")
    return raw


def _write_synced(path: Path, payload: bytes) -> None:
    with open(path, "xb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())


def _sync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish(
    landing_path: str | Path,
    records_lines: Sequence[bytes | str],
    partition: str,
    producer_id: str,
    seq: int,
    stream: str,
) -> Path:
    """Publish one data file of one partition with its audit record; return the data file's path.

    Both files are written and fsynced in ``_tmp/``; the audit record is renamed into ``audit/``,
    then the data file into ``data/``. ``records_lines`` are the records without line breaks
    (``bytes`` allowed so that deliberately malformed encodings can be written); blank lines are refused.
    """
    parse_partition(partition)
    if not _PRODUCER_ID.match(producer_id):
        raise ValueError(f"producer_id {producer_id!r} may only hold letters, digits, '_', '.', '-'")
    if seq < 0:
        raise ValueError(f"seq must be >= 0, got {seq}")
    lines = [_as_bytes(line) for line in records_lines]
    if not lines:
        raise ValueError("refusing to publish an empty data file")

    tmp, audits, data = tmp_dir(landing_path), audit_dir(landing_path), data_dir(landing_path)
    for folder in (tmp, audits, data):
        folder.mkdir(parents=True, exist_ok=True)
    hour = parse_partition(partition).strftime("%Y%m%dT%H")
    while True:
        name = f"{hour}-{producer_id}-{seq:08d}-{uuid.uuid4().hex[:8]}{DATA_SUFFIX}"
        if not (data / name).exists() and not (audits / audit_name(name)).exists():
            break

    audit = {
        "version": AUDIT_VERSION,
        "stream": stream,
        "file": name,
        "producer": producer_id,
        "records": len(lines),
        "partitions": {partition: len(lines)},
        "produced_at": datetime.now(UTC).isoformat(),
    }
    tmp_data, tmp_audit = tmp / name, tmp / audit_name(name)
    try:
        _write_synced(tmp_data, b"".join(line + b"\n" for line in lines))
        _write_synced(tmp_audit, (json.dumps(audit, indent=2) + "\n").encode("utf-8"))
        _sync_dir(tmp)
        os.rename(tmp_audit, audits / audit_name(name))
        _sync_dir(audits)
        os.rename(tmp_data, data / name)
        _sync_dir(data)
    except BaseException:
        for leftover in (tmp_data, tmp_audit):
            leftover.unlink(missing_ok=True)
        raise
    return data / name


def _check_audit(record: Any, expected_file: str) -> str | None:
    """Why an audit record is unusable, or None when it is fine."""
    if not isinstance(record, dict):
        return "not a JSON object"
    missing = [key for key in _AUDIT_KEYS if key not in record]
    if missing:
        return f"missing keys {missing}"
    if record["version"] != AUDIT_VERSION:
        return f"unsupported version {record['version']!r}"
    if record["file"] != expected_file:
        return f"'file' is {record['file']!r}, expected {expected_file!r}"
    partitions = record["partitions"]
    if not isinstance(partitions, dict) or not partitions:
        return "'partitions' must be a non-empty object"
    for key, count in partitions.items():
        try:
            parse_partition(key)
        except ValueError as exc:
            return str(exc)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return f"count of partition {key!r} is not a non-negative integer: {count!r}"
    records = record["records"]
    if not isinstance(records, int) or isinstance(records, bool) or records != sum(partitions.values()):
        return f"'records' {records!r} is not the sum of 'partitions' {sum(partitions.values())}"
    return None


def _load_audits(
    landing_path: str | Path, *, hidden: bool = False
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The usable audit records keyed by data file name, and why each unusable one was skipped (same key).

    ``hidden``: also read audit records whose name starts with ``.`` (those of hidden data files).
    """
    folder = audit_dir(landing_path)
    audits: dict[str, dict[str, Any]] = {}
    problems: dict[str, str] = {}
    if not folder.is_dir():
        return audits, problems
    for path in sorted(folder.iterdir()):
        if not path.name.endswith(AUDIT_SUFFIX) or (path.name.startswith(".") and not hidden):
            continue
        if not path.is_file():
            continue
        expected_file = path.name[: -len(AUDIT_SUFFIX)] + DATA_SUFFIX
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("skipping unreadable audit record %s: %s", path, exc)
            problems[expected_file] = f"audit record {path.name} is unreadable: {exc}"
            continue
        problem = _check_audit(record, expected_file)
        if problem:
            log.warning("skipping invalid audit record %s: %s", path, problem)
            problems[expected_file] = f"audit record {path.name} is invalid: {problem}"
            continue
        audits[expected_file] = record
    return audits, problems


def read_audits(landing_path: str | Path, *, hidden: bool = False) -> dict[str, dict[str, Any]]:
    """All readable audit records of a landing path, keyed by data file name (``X.jsonl``).

    An audit file that cannot be read, is not JSON or does not follow the schema is skipped with a
    warning naming it. ``hidden``: also those named ``.X.json`` (audits of hidden data files).
    """
    return _load_audits(landing_path, hidden=hidden)[0]


def partition_totals(audits: Mapping[str, Mapping[str, Any]], files: Iterable[str]) -> dict[str, int]:
    """Records per partition key, summed over the audit records of ``files`` (data file names).

    A file without an audit record counts nothing.
    """
    counts: dict[str, int] = {}
    for file_name in files:
        for partition, count in (audits.get(file_name) or {}).get("partitions", {}).items():
            counts[partition] = counts.get(partition, 0) + count
    return dict(sorted(counts.items()))


def expected_counts(landing_path: str | Path, ingested: Iterable[str] = ()) -> dict[str, int]:
    """Records per partition key that the lake must hold (rows + rejects): :meth:`Inspection.expected`
    without inspecting the files.

    Summed over the audit records whose data file is in ``data/`` or was ingested (``ingested``: names
    from the writer's source positions). Audits without a data file that was never ingested (a producer
    that died between the two renames) are not counted.
    """
    audits = _load_audits(landing_path, hidden=True)[0]
    return expected_totals(audits, published_files(landing_path), ingested)


def expected_totals(
    audits: Mapping[str, Mapping[str, Any]], published: Iterable[str], ingested: Iterable[str]
) -> dict[str, int]:
    """THE expected count of every hour, which reconciliation and the close's verification both use:
    the sum of ``partitions[hour]`` over the audit records of the files that are in ``data/``
    (``published``, hidden and empty ones included) or that the writer ingested (``ingested``, even when
    deleted since)."""
    return partition_totals(audits, set(published) | set(ingested))


# ---------------------------------------------------------------- inspection: nothing lost silently


@dataclass(frozen=True)
class FileStat:
    """Size and modification time (ms since the epoch) of a landing file, as the writer recorded them."""

    size: int
    mtime_ms: int


def file_stat(path: Path) -> FileStat:
    st = path.stat()
    return FileStat(st.st_size, st.st_mtime_ns // 1_000_000)


class Reason(StrEnum):
    """Why a landing file is reported (see ``docs/landing-zone.md``, *Reports*)."""

    HIDDEN = "hidden name"  # starts with '_' or '.': Spark's file source never reads it
    EMPTY = "zero bytes"  # Spark's file scan skips it: never ingested
    NO_AUDIT = "no audit"  # no usable audit record: its lines are expected nowhere
    COUNT = "audit count differs"  # the audit's records != the non-blank lines of the file
    HOURS = "not one hour"  # the file (or its audit) holds events of several hours, or of another hour
    CHANGED = "changed after ingest"  # size or modification time differ from what the writer recorded
    DELETED = "deleted after ingest"  # ingested, no longer in data/


@dataclass(frozen=True)
class Finding:
    """One reported landing file: its name, why, the details, and the hours (partition keys) it touches.

    ``blocking``: lines may be lost or miscounted, so verification of those hours fails; a non-blocking
    finding (an empty file nobody expects lines from, a file deleted after its rows were ingested) is
    reported only."""

    file: str
    reason: Reason
    detail: str
    hours: tuple[str, ...] = ()
    blocking: bool = True

    def line(self) -> str:
        return f"{self.file}: {self.reason}: {self.detail}"


@dataclass
class FileReport:
    """What :func:`inspect` learned about one file of ``data/`` (or one ingested file no longer there)."""

    name: str
    present: bool
    ingested: bool
    hours: set[str] = field(default_factory=set)
    #: non-blank lines, when the file was read
    lines: int | None = None
    #: events per hour, from the event times of the lines a writer would accept (when read)
    line_hours: dict[str, int] = field(default_factory=dict)


@dataclass
class Inspection:
    """The landing zone against the writer's source positions (:func:`inspect`)."""

    audits: dict[str, dict[str, Any]]
    files: dict[str, FileReport]
    findings: list[Finding]
    #: files in ``data/`` that the writer will read and has not yet (not hidden, not empty)
    pending: list[str]

    def expected(self) -> dict[str, int]:
        """Records per hour the lake must hold (:func:`expected_totals`)."""
        return expected_totals(
            self.audits, [n for n, f in self.files.items() if f.present],
            [n for n, f in self.files.items() if f.ingested],
        )

    def findings_for(self, hour: str) -> list[Finding]:
        return [f for f in self.findings if hour in f.hours]

    def pending_for(self, hour: str) -> list[str]:
        return [n for n in self.pending if hour in self.files[n].hours]

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.blocking]


def hidden(name: str) -> bool:
    """Spark's file sources skip names starting with ``_`` or ``.``: such files are never ingested."""
    return name.startswith(("_", "."))


def name_hour(name: str) -> str | None:
    """The partition key a data file's name starts with (a hidden name's prefix ignored), or None."""
    match = FILE_NAME.match(name.lstrip("_."))
    if not match:
        return None
    return datetime.strptime(match.group("hour"), "%Y%m%dT%H").replace(tzinfo=UTC).isoformat()


@dataclass(frozen=True)
class EventTime:
    """How to read the hour of a line: the stream's event-time field and its accepted range."""

    name: str
    min_time: datetime = datetime(2000, 1, 1, tzinfo=UTC)
    max_future: timedelta = timedelta(days=1)


def _line_hour(line: bytes, event_time: EventTime, latest: datetime) -> str | None:
    """The hour of a line's event time when a writer would accept that time, else None."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    value = record.get(event_time.name) if isinstance(record, dict) else None
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    if dt.tzinfo is None or not event_time.min_time <= dt <= latest:
        return None
    return partition_key(dt)


def read_lines(path: Path, event_time: EventTime | None) -> tuple[int, dict[str, int]]:
    """Non-blank lines of a data file (split like Spark's text source: ``\n``, ``\r\n``, ``\r``) and,
    with ``event_time``, the events per hour among them."""
    landed = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    lines = 0
    hours: dict[str, int] = {}
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        lines += 1
        if event_time is not None:
            hour = _line_hour(line, event_time, landed + event_time.max_future)
            if hour is not None:
                hours[hour] = hours.get(hour, 0) + 1
    return lines, dict(sorted(hours.items()))


def _hours_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{hour} ({n})" for hour, n in counts.items())


def inspect(
    landing_path: str | Path,
    ingested: Mapping[str, FileStat | None] | Iterable[str] = (),
    *,
    event_time: EventTime | None = None,
    hours: Collection[str] | None = None,
    files: Collection[str] = (),
) -> Inspection:
    """Every file of ``data/`` is ingested, pending, or reported by name with a reason (:class:`Finding`).

    :param ingested: the files the writer ingested (its source positions), with the size and modification
        time it recorded (None when unknown: an older commit, or a name found only in the tables)
    :param event_time: read each line's event time, to find files holding several hours
    :param hours: inspect only the files of these hours (by audit record, name, or lines) plus ``files``;
        the expected counts still cover every audit record (None: every file)
    :param files: more files to inspect in any case (e.g. the sources of an hour's rows)

    Reads the audit records, ``os.stat`` of each file and, for the files inspected, their lines (to
    compare with the audit's count and to find their hours).
    """
    stats: Mapping[str, FileStat | None] = (
        ingested if isinstance(ingested, Mapping) else dict.fromkeys(ingested)
    )
    audits, problems = _load_audits(landing_path, hidden=True)
    folder = data_dir(landing_path)
    present = sorted(p for p in folder.glob(f"*{DATA_SUFFIX}") if p.is_file()) if folder.is_dir() else []
    scope = None if hours is None else set(hours)
    report = Inspection(audits, {}, [], [])

    def add(name: str, reason: Reason, detail: str, *, blocking: bool = True) -> None:
        hours_of = tuple(sorted(report.files[name].hours))
        report.findings.append(Finding(name, reason, detail, hours_of, blocking))

    for path in present:
        name = path.name
        audit = audits.get(name)
        known = set((audit or {}).get("partitions", {}))
        if (by_name := name_hour(name)) is not None:
            known.add(by_name)
        info = report.files[name] = FileReport(name, True, name in stats, set(known))
        if scope is not None and not (known & scope) and known and name not in files:
            continue  # a file of another hour
        stat = file_stat(path)
        if stat.size:
            info.lines, info.line_hours = read_lines(path, event_time)
            info.hours |= set(info.line_hours)
        if scope is not None and not (info.hours & scope) and name not in files:
            continue
        recorded = stats.get(name)
        if recorded is not None and recorded != stat:
            add(name, Reason.CHANGED, f"the writer read {recorded.size} bytes (modified at {recorded.mtime_ms} ms); "
                f"now {stat.size} bytes (modified at {stat.mtime_ms} ms): what changed since is not in the lake")
        if hidden(name):
            add(name, Reason.HIDDEN, "names starting with '_' or '.' are never ingested (Spark's file source "
                "skips them): publish it again under a contract name")
        if stat.size == 0:
            records = (audit or {}).get("records", 0)
            add(name, Reason.EMPTY, "the file is empty" + (" (ingested as nothing)" if info.ingested else
                " and is never ingested (Spark's file scan skips empty files)") + (
                f", yet its audit record reports {records} record(s)" if records else " (nothing expected)"),
                blocking=bool(records))
            continue
        if audit is None:
            why = problems.get(name, f"audit/{audit_name(name)} does not exist")
            add(name, Reason.NO_AUDIT, f"{why}: its {info.lines} line(s) are expected in no hour")
        elif info.lines != audit["records"]:
            add(name, Reason.COUNT, f"audit record reports {audit['records']} record(s), the file holds "
                f"{info.lines} non-blank line(s)")
        audit_hours = dict((audit or {}).get("partitions", {}))
        if len(audit_hours) > 1:
            add(name, Reason.HOURS, f"its audit record names {len(audit_hours)} hours "
                f"{_hours_text(audit_hours)}; a file holds one hour")
        elif len(info.line_hours) > 1 or (audit_hours and set(info.line_hours) - set(audit_hours)):
            what = f"holds events of {_hours_text(info.line_hours)}"
            if audit_hours:
                what += f", its audit record names {_hours_text(audit_hours)}"
            add(name, Reason.HOURS, f"{what}; a file holds one hour (the lake splits it by event time)")
        if not info.ingested and not hidden(name):
            report.pending.append(name)

    for name in sorted(set(stats) - set(report.files)):
        audit = audits.get(name)
        known = set((audit or {}).get("partitions", {}))
        if (by_name := name_hour(name)) is not None:
            known.add(by_name)
        report.files[name] = FileReport(name, False, True, known)
        if scope is not None and not (known & scope) and name not in files:
            continue
        if audit is None:
            add(name, Reason.DELETED, "ingested, then deleted from data/ together with its audit record: "
                "its rows are in the lake but expected in no hour")
        else:
            add(name, Reason.DELETED, f"ingested, then deleted from data/: its {audit['records']} record(s) "
                "are still expected (its audit record is kept)", blocking=False)
    return report


# ---------------------------------------------------------------- metadata only: what the writer will read


@dataclass(frozen=True)
class Landed:
    """A data file of ``data/`` the writer reads (not hidden, not empty), from the file system's metadata and
    its name or audit record: no line is read (the triggerer's view of the landing zone)."""

    name: str
    size: int
    mtime_ms: int
    #: when it reached ``data/`` at the latest known: its modification or status-change time, whichever is
    #: later (a rename into ``data/`` sets the status-change time; a copy that keeps an old modification time
    #: does too)
    landed_ms: int
    #: its hour (partition key) from its name, else from its audit record (the earliest hour it names);
    #: None when neither tells
    hour: str | None


def landed_files(landing_path: str | Path) -> list[Landed]:
    """The files of ``data/`` the writer will read or has read, oldest modification time first.

    One ``os.stat`` per file; an audit record is read only for a file whose name does not follow the contract.
    Hidden and empty files are left out: Spark's file source never reads them (``inspect`` reports them).
    """
    folder = data_dir(landing_path)
    if not folder.is_dir():
        return []
    out: list[Landed] = []
    for entry in os.scandir(folder):
        name = entry.name
        if not name.endswith(DATA_SUFFIX) or hidden(name):
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:  # moved away while listing
            continue
        if not entry.is_file() or st.st_size == 0:
            continue
        hour = name_hour(name)
        if hour is None:
            hour = _audit_hour(landing_path, name)
        mtime = st.st_mtime_ns // 1_000_000
        out.append(Landed(name, st.st_size, mtime, max(mtime, st.st_ctime_ns // 1_000_000), hour))
    out.sort(key=lambda f: (f.mtime_ms, f.name))
    return out


def _audit_hour(landing_path: str | Path, name: str) -> str | None:
    try:
        record = json.loads((audit_dir(landing_path) / audit_name(name)).read_bytes())
    except (OSError, ValueError):
        return None
    if _check_audit(record, name) is not None:
        return None
    return min(record["partitions"])
