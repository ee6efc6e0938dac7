"""The landing-zone contract: where producers publish files and how their audit records look.

A stream with ``landing_path`` L uses three folders (see ``docs/landing-zone.md``):

* ``L/_tmp/``  - files being written; never read by anyone;
* ``L/audit/`` - one JSON audit record ``X.json`` per data file ``X.jsonl``;
* ``L/data/``  - published newline-delimited JSON files ``X.jsonl``, one event per line;
* ``L/archive/<YYYYmmddTHH>/`` - the data files and audit records of a closed hour, moved there by laketide
  (:mod:`laketide.close.archive`): never written by producers, never listed by the writer.

A file is written fully into ``_tmp/`` and then renamed (atomic on one filesystem). The audit record
is renamed into ``audit/`` *before* its data file is renamed into ``data/``, so every visible data file
has its audit record. Each data file holds the events of exactly one partition (UTC hour).

What a landing zone holds against what the writer read (reports by file, the triggerer's view) is
:mod:`laketide.ingest.inspection`.

Stdlib only: producers and Airflow tasks import this without Spark.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from laketide.lake.hours import parse_partition

log = logging.getLogger(__name__)

AUDIT_VERSION = 1
DATA_SUFFIX = ".jsonl"
AUDIT_SUFFIX = ".json"
#: ``<YYYYmmddTHH>-<producer_id>-<seq:08d>-<uuid8>.jsonl``
FILE_NAME = re.compile(
    r"^(?P<hour>\d{8}T\d{2})-(?P<producer>[A-Za-z0-9_.-]+)-(?P<seq>\d{8,})-(?P<token>[0-9a-f]{8})\.jsonl$"
)
_PRODUCER_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
#: the name of an hour's archive folder
_STAMP = re.compile(r"^\d{8}T\d{2}$")
_AUDIT_KEYS = ("version", "stream", "file", "producer", "records", "partitions", "produced_at")


def data_dir(landing_path: str | Path) -> Path:
    """Where published data files (``*.jsonl``) live: ``L/data``."""
    return Path(landing_path) / "data"


def published_files(landing_path: str | Path, archived: Collection[str] | None = ()) -> set[str]:
    """Names of the data files in ``L/data`` (``*.jsonl``; hidden names too, which the writer never reads), and in
    the archive folders of the hours ``archived`` (None: every archived hour), listed after ``data/``."""
    live = {p.name for p in data_dir(landing_path).glob(f"*{DATA_SUFFIX}")}
    return live | (set(archived_files(landing_path, archived)) if archived is None or archived else set())


def audit_dir(landing_path: str | Path) -> Path:
    """Where audit records (``*.json``, one per data file) live: ``L/audit``."""
    return Path(landing_path) / "audit"


def tmp_dir(landing_path: str | Path) -> Path:
    """Where files are written before being renamed into place: ``L/_tmp``."""
    return Path(landing_path) / "_tmp"


def archive_dir(landing_path: str | Path) -> Path:
    """Where the files of closed hours are kept: ``L/archive``, a folder per hour."""
    return Path(landing_path) / "archive"


def hour_archive(landing_path: str | Path, hour: str) -> Path:
    """The archive folder of the hour ``hour`` (a partition key): ``L/archive/<YYYYmmddTHH>``, holding its data
    files ``X.jsonl`` and their audit records ``X.json`` side by side."""
    return archive_dir(landing_path) / parse_partition(hour).strftime("%Y%m%dT%H")


def archived_folders(landing_path: str | Path, hours: Collection[str] | None = None) -> list[Path]:
    """The archive folders of ``hours`` (partition keys) that exist, or of every archived hour (None)."""
    if hours is not None:
        return [folder for hour in sorted(hours) if (folder := hour_archive(landing_path, hour)).is_dir()]
    root = archive_dir(landing_path)
    return sorted(p for p in root.iterdir() if p.is_dir() and _STAMP.fullmatch(p.name)) if root.is_dir() else []


def archived_files(landing_path: str | Path, hours: Collection[str] | None = None) -> dict[str, Path]:
    """The archived data files of ``hours`` (None: every hour), by name."""
    return {p.name: p for folder in archived_folders(landing_path, hours) for p in folder.glob(f"*{DATA_SUFFIX}")}


def landed_path(landing_path: str | Path, name: str) -> Path:
    """Where the data file ``name`` is now: in ``data/``, else in its hour's archive folder (the name tells the
    hour); its ``data/`` path when it is in neither."""
    live = data_dir(landing_path) / name
    if live.exists() or (hour := name_hour(name)) is None:
        return live
    kept = hour_archive(landing_path, hour) / name
    return kept if kept.exists() else live


def move_files(landing_path: str | Path, names: Iterable[str], *, to_archive: bool,
               between: Callable[[], None] | None = None) -> list[str]:
    """Move the data files ``names`` and their audit records between ``data/`` + ``audit/`` and their hours'
    archive folders (``to_archive``, or back); return the names moved (a file not where it is moved from, moved
    meanwhile, is left out). Every data file is renamed before the audit records (``between`` is called in
    between); the folders are synced once, at the end. A rename is atomic: whatever the moment of a crash, each file
    is in one of its two places, and whoever reads an hour's files lists ``data/`` before the archive (and
    ``audit/`` before it), so finds it; :func:`stray_audits` names the audit records a crash left behind."""
    archive = archive_dir(landing_path)
    kept: dict[str, Path] = {}  # the archive folder of each file, by name
    for name in names:
        match = FILE_NAME.match(name)
        if match is None:
            raise ValueError(f"only a data file named by the contract has an hour to archive it in: {name!r}")
        kept[name] = archive / match.group("hour")
    made: set[Path] = set()
    touched: set[Path] = set()

    def rename(live: Path, folder: Path, file: str) -> bool:
        source, target = (live, folder) if to_archive else (folder, live)
        if target not in made:
            target.mkdir(parents=True, exist_ok=True)
            made.add(target)
        try:
            os.rename(source / file, target / file)
        except FileNotFoundError:
            return False
        touched.update((source, target))
        return True

    data, audits = data_dir(landing_path), audit_dir(landing_path)
    moved = [name for name, folder in kept.items() if rename(data, folder, name)]
    if between is not None:
        between()
    for name in moved:  # the audit records after every data file (a file without one: its verification named it)
        rename(audits, kept[name], audit_name(name))
    for folder in touched:
        _sync_dir(folder)
    return moved


def stray_audits(landing_path: str | Path) -> list[str]:
    """The data files (names) already in their hour's archive folder whose audit record is still in ``audit/``:
    a move cut off between its two renames (the next move into the archive takes them along)."""
    folder = audit_dir(landing_path)
    if not folder.is_dir():
        return []
    live = data_dir(landing_path)
    out = []
    for entry in os.scandir(folder):
        name = entry.name[: -len(AUDIT_SUFFIX)] + DATA_SUFFIX if entry.name.endswith(AUDIT_SUFFIX) else ""
        match = FILE_NAME.match(name)
        if match and not (live / name).exists() and (archive_dir(landing_path) / match.group("hour") / name).exists():
            out.append(name)
    return sorted(out)


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


#: JSON's whitespace (RFC 8259): a line holding nothing else is blank, not a record
JSON_WHITESPACE = b" \t\r\n"


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a data file as the writer (Spark's text source) reads them: ended by ``\n``, ``\r\n`` or
    ``\r``; the last line needs no line break."""
    return data.splitlines()


def is_blank(line: bytes) -> bool:
    """THE definition of a blank line, shared by the writer (Spark's JSON reader finds no token in it), inspection,
    reconciliation and the landing contract: empty, or only spaces and tabs (JSON's whitespace). A blank line is no
    record: it is neither counted nor rejected. Every other line is a record, ingested or rejected with a reason:
    a line of only other control characters (``\x0b``, ``\x0c``, NUL) or a byte order mark is a rejected one."""
    return not line.strip(JSON_WHITESPACE)


def _as_bytes(line: bytes | str) -> bytes:
    raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if b"\n" in raw or b"\r" in raw:
        raise ValueError(f"a record may not contain a line break: {raw[:80]!r}")
    if is_blank(raw):
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
    if not _PRODUCER_ID.fullmatch(producer_id):
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
    landing_path: str | Path, *, hidden: bool = False, archived: Collection[str] | None = ()
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The usable audit records keyed by data file name, and why each unusable one was skipped (same key).

    ``hidden``: also read audit records whose name starts with ``.`` (those of hidden data files).
    ``archived``: also those of the archive folders of these hours (None: of every archived hour), read after
    ``audit/`` (a record moved into the archive meanwhile is read there).
    """
    audits: dict[str, dict[str, Any]] = {}
    problems: dict[str, str] = {}
    live = audit_dir(landing_path)
    folders = ([live] if live.is_dir() else []) + (archived_folders(landing_path, archived)
                                                   if archived is None or archived else [])
    for path in (p for folder in folders for p in sorted(folder.iterdir())):
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


def read_audits(landing_path: str | Path, *, hidden: bool = False,
                archived: Collection[str] | None = ()) -> dict[str, dict[str, Any]]:
    """All readable audit records of a landing path, keyed by data file name (``X.jsonl``).

    An audit file that cannot be read, is not JSON or does not follow the schema is skipped with a
    warning naming it. ``hidden``: also those named ``.X.json`` (audits of hidden data files). ``archived``: also
    those of the archive folders of these hours (None: every archived hour).
    """
    return _load_audits(landing_path, hidden=hidden, archived=archived)[0]


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

    Summed over the audit records whose data file is in ``data/`` or the archive or was ingested (``ingested``:
    names from the writer's source positions). Audits without a data file that was never ingested (a producer
    that died between the two renames) are not counted.
    """
    audits = _load_audits(landing_path, hidden=True, archived=None)[0]
    return expected_totals(audits, published_files(landing_path, None), ingested)


def expected_totals(
    audits: Mapping[str, Mapping[str, Any]], published: Iterable[str], ingested: Iterable[str]
) -> dict[str, int]:
    """THE expected count of every hour, which reconciliation and the close's verification both use:
    the sum of ``partitions[hour]`` over the audit records of the files that are in ``data/``
    (``published``, hidden and empty ones included) or that the writer ingested (``ingested``, even when
    deleted since)."""
    return partition_totals(audits, set(published) | set(ingested))


def hidden(name: str) -> bool:
    """Spark's file sources skip names starting with ``_`` or ``.``: such files are never ingested."""
    return name.startswith(("_", "."))


def name_hour(name: str) -> str | None:
    """The partition key a data file's name starts with (a hidden name's prefix ignored), or None."""
    match = FILE_NAME.match(name.lstrip("_."))
    if not match:
        return None
    return datetime.strptime(match.group("hour"), "%Y%m%dT%H").replace(tzinfo=UTC).isoformat()

