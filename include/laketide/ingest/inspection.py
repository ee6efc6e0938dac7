"""Inspecting a landing zone: every file of ``data/`` is ingested, pending, or reported by name with a reason.

The checks behind *Reports* in ``docs/landing-zone.md``: :func:`inspect` reads the audit records, ``os.stat``
of each file and, for the files inspected, their lines; :func:`landed_files` is the metadata-only view the
partition check uses in the triggerer (no line read). The contract itself (folders, names, audit records,
publishing) is :mod:`laketide.ingest.landing`.

Stdlib only, like the contract: Airflow tasks import this without Spark.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laketide.ingest.columns import human
from laketide.ingest.landing import (
    DATA_SUFFIX,
    _check_audit,
    _load_audits,
    archived_files,
    archived_folders,
    audit_dir,
    audit_name,
    data_dir,
    expected_totals,
    hidden,
    is_blank,
    name_hour,
    split_lines,
)
from laketide.lake.file_stats import FileStat, content_hash, file_stat
from laketide.lake.hours import partition_key

if TYPE_CHECKING:
    from laketide.config import StreamConfig


class Reason(StrEnum):
    """Why a landing file is reported (see ``docs/landing-zone.md``, *Reports*)."""

    HIDDEN = "hidden name"  # starts with '_' or '.': Spark's file source never reads it
    EMPTY = "zero bytes"  # Spark's file scan skips it: never ingested
    NO_AUDIT = "no audit"  # no usable audit record: its lines are expected nowhere
    COUNT = "audit count differs"  # the audit's records != the non-blank lines of the file
    HOURS = "not one hour"  # the file (or its audit) holds events of several hours, or of another hour
    CHANGED = "changed after ingest"  # size, modification time or content differ from what the writer recorded
    DELETED = "deleted after ingest"  # ingested, no longer in data/
    NOT_DATA = "not a data file"  # its name does not end in '.jsonl' (UPPER.JSONL, notes.txt, x.jsonl.bak): never read
    TOO_OLD = "older than source_log_retention"  # not ingested, modified too long before the newest ingested file


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
    """Records (non-blank lines, ``landing.is_blank``) of a data file (split like Spark's text source:
    ``landing.split_lines``) and, with ``event_time``, the events per hour among them."""
    landed = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    lines = 0
    hours: dict[str, int] = {}
    for line in split_lines(path.read_bytes()):
        if is_blank(line):
            continue
        lines += 1
        if event_time is not None:
            hour = _line_hour(line, event_time, landed + event_time.max_future)
            if hour is not None:
                hours[hour] = hours.get(hour, 0) + 1
    return lines, dict(sorted(hours.items()))


def read_through(path: Path, size: int) -> tuple[int, int]:
    """What the writer read of a data file listed at ``size`` bytes, if it grew since: Spark's text source (Hadoop's
    line reader) reads every line that starts at or before the listed end, the one starting exactly there too,
    through its line break; returns those bytes and the records (non-blank lines) among them."""
    data = path.read_bytes()
    end = lines = 0
    while end < len(data) and end <= size:
        cut = min((i for i in (data.find(b"\n", end), data.find(b"\r", end)) if i >= 0), default=len(data) - 1)
        if data[cut:cut + 2] == b"\r\n":
            cut += 1
        lines += not is_blank(data[end:cut + 1])
        end = cut + 1
    return end, lines


def _hours_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{hour} ({n})" for hour, n in counts.items())


def inspect(
    landing_path: str | Path,
    ingested: Mapping[str, FileStat | None] | Iterable[str] = (),
    *,
    event_time: EventTime | None = None,
    hours: Collection[str] | None = None,
    files: Collection[str] = (),
    retention: timedelta | None = None,
) -> Inspection:
    """Every file of ``data/`` is ingested, pending, or reported by name with a reason (:class:`Finding`).

    :param ingested: the files the writer ingested (its source positions), with the size and modification
        time it recorded (None when unknown: an older commit, or a name found only in the tables)
    :param event_time: read each line's event time, to find files holding several hours
    :param hours: inspect only the files of these hours (by audit record, name, or lines) plus ``files``;
        the expected counts still cover every audit record of ``data/`` (None: every file). The archive folders
        of these hours (of every hour: None) are read as well: an archived file is inspected as one of ``data/``
    :param files: more files to inspect in any case (e.g. the sources of an hour's rows)
    :param retention: the stream's ``source_log_retention``: a file not ingested whose modification time is older
        than this behind the newest ingested file's is never taken by the writer (``ingest.late_files``), so it is
        reported (:attr:`Reason.TOO_OLD`), not pending

    Reads the audit records, ``os.stat`` of each file and, for the files inspected, their lines (to
    compare with the audit's count and to find their hours).
    """
    stats: Mapping[str, FileStat | None] = (
        ingested if isinstance(ingested, Mapping) else dict.fromkeys(ingested)
    )
    folder = data_dir(landing_path)
    present = sorted(p for p in folder.glob(f"*{DATA_SUFFIX}") if p.is_file()) if folder.is_dir() else []
    # the archive of the hours inspected after data/: a file archived meanwhile is found there
    live = {p.name for p in present}
    present += sorted(p for name, p in archived_files(landing_path, hours).items() if name not in live)
    # the audit records after the data files: a producer renames a file's audit record into place before the file,
    # so every data file listed has its record by now (read first, a file published in between had none)
    audits, problems = _load_audits(landing_path, hidden=True, archived=hours)
    newest = max((s.mtime_ms for s in stats.values() if s is not None), default=None)
    forgotten_ms = None if retention is None or newest is None else newest - int(retention.total_seconds() * 1000)
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
        try:
            stat = file_stat(path)
        except FileNotFoundError:  # moved away since the listing
            del report.files[name]
            continue
        if stat.size:
            info.lines, info.line_hours = read_lines(path, event_time)
            info.hours |= set(info.line_hours)
        if scope is not None and not (info.hours & scope) and name not in files:
            continue
        recorded = stats.get(name)
        if recorded is not None and recorded != stat:
            add(name, Reason.CHANGED, _changed(path, recorded, stat))
        elif recorded is not None and recorded.content is not None and \
                (now := content_hash(path, stat.size)) not in (None, recorded.content):
            add(name, Reason.CHANGED, f"same size ({stat.size} bytes) and modification time as when the writer read "
                f"it, other content (hash {recorded.content:016x} at ingest, {now:016x} now): it was rewritten and "
                "its old modification time put back (rsync -t, cp -p of an edited copy); what changed is not in the "
                "lake: publish the changed lines as a new file, or redo from the snapshot before its ingest")
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
            if forgotten_ms is not None and stat.mtime_ms < forgotten_ms and retention is not None:
                add(name, Reason.TOO_OLD, f"modified at {_iso(stat.mtime_ms)}, {human(retention)} (source_log_"
                    f"retention) or more before the newest ingested file ({_iso(newest or 0)}): the writer will never "
                    f"take it; set its modification time to now (touch {path}) to ingest it")
            else:
                report.pending.append(name)

    others = sorted(p.name for p in folder.iterdir() if not p.name.endswith(DATA_SUFFIX) and p.is_file()) \
        if folder.is_dir() else []
    for name in others:
        report.findings.append(_not_data(name, audits, {p.name for p in present} | set(stats)))

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


def _iso(ms: int, timespec: str = "seconds") -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec=timespec)


def _changed(path: Path, recorded: FileStat, now: FileStat) -> str:
    """The detail of a file changed after ingest: what the writer read of it, and what it holds now."""
    then, after = _iso(recorded.mtime_ms, "milliseconds"), _iso(now.mtime_ms, "milliseconds")
    if now.size > recorded.size:
        read_bytes, records = read_through(path, recorded.size)
        how = (": Spark's line reader reads every line starting at or before the size it listed"
               if read_bytes > recorded.size else "")
        return (f"the writer read its first {read_bytes} bytes, {records} record(s) (listed at {recorded.size} "
                f"bytes, modified at {then}{how}); now {now.size} bytes (modified at {after}): the lines after byte "
                f"{read_bytes} are not in the lake (publish only those, in a new file, to ingest them)")
    return (f"the writer read {recorded.size} bytes (modified at {then}); now {now.size} bytes (modified at "
            f"{after}): what changed since is not in the lake")


_HOUR_PREFIX = re.compile(r"^[_.]*(\d{8}T\d{2})-")


def _not_data(name: str, audits: Mapping[str, Mapping[str, Any]], known: Collection[str]) -> Finding:
    """The report of a file in ``data/`` whose name does not end in ``.jsonl``: the writer never reads it.

    Blocking when an audit record expects the data file it seems meant to be (``UPPER.JSONL`` with
    ``audit/UPPER.json``) and that file is neither in ``data/`` nor ingested: its records are expected in no hour
    otherwise, and would be lost without a word; else a note (a backup, notes, a temporary file)."""
    stem = re.sub(r"(?i)\.jsonl.*$", "", name) if ".jsonl" in name.lower() else name.rsplit(".", 1)[0]
    meant = stem + DATA_SUFFIX
    audit = audits.get(meant) if meant not in known else None
    hours = set((audit or {}).get("partitions", {}))
    if (match := _HOUR_PREFIX.match(name)) is not None:
        hours.add(datetime.strptime(match.group(1), "%Y%m%dT%H").replace(tzinfo=UTC).isoformat())
    detail = (f"only names ending in '{DATA_SUFFIX}' (lower case) are read, so the writer never reads it; if it "
              f"holds events, publish them again as a data file ({meant}) with its audit record")
    if audit is not None:
        detail += f"; audit/{audit_name(meant)} expects {audit['records']} record(s) from {meant}, which is missing"
    return Finding(name, Reason.NOT_DATA, detail, tuple(sorted(hours)), blocking=audit is not None)


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
    return _landed(landing_path, [data_dir(landing_path)])


def archived_landed(landing_path: str | Path) -> list[Landed]:
    """The data files of every hour's archive folder (``landing.hour_archive``), as :func:`landed_files` sees
    ``data/``: one ``os.stat`` per file (a redo looks for the files it re-ingests among them)."""
    return _landed(landing_path, archived_folders(landing_path))


def _landed(landing_path: str | Path, folders: list[Path]) -> list[Landed]:
    out: list[Landed] = []
    for folder in folders:
        if not folder.is_dir():
            continue
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


def audit_hours(landing_path: str | Path, names: Iterable[str]) -> dict[str, str]:
    """The hour of each of the landing files ``names`` whose name does not tell it, from its audit record (the
    earliest hour it names); files without a usable audit record are left out."""
    out: dict[str, str] = {}
    for name in names:
        if name_hour(name) is None and (hour := _audit_hour(landing_path, name)) is not None:
            out[name] = hour
    return out


def _audit_hour(landing_path: str | Path, name: str) -> str | None:
    try:
        record = json.loads((audit_dir(landing_path) / audit_name(name)).read_bytes())
    except (OSError, ValueError):
        return None
    if _check_audit(record, name) is not None:
        return None
    return min(record["partitions"])


def event_time(stream: StreamConfig) -> EventTime:
    """How ``inspection.inspect`` reads the hour of a line of ``stream`` (the writer's accepted range)."""
    return EventTime(stream.event_time_field, datetime.fromisoformat(stream.min_event_time), stream.max_future)
