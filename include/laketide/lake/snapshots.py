"""The newest snapshots of an Iceberg table, read without parsing the table's whole history.

pyiceberg's ``load_table`` parses the whole metadata JSON, which gains a snapshot (~1 KB) and a snapshot-log
entry with every commit: a status check polling from the triggerer would get slower as the table ages.
``lineage`` reads only:

* the catalog row (the metadata location) and the first 64 KiB of the metadata file, which hold
  ``current-snapshot-id`` (Iceberg Java and pyiceberg both write it before ``snapshots``);
* a few 8 KiB probes that find where ``snapshot-log`` starts: it follows the snapshots and grows with the history
  too (one entry per snapshot), so a window read back from the end of the file would not be bounded;
* a window ending there, doubled until it holds every snapshot the walk from the current one needs.

So the bytes read depend on the snapshots needed, not on the history (only the probes grow, as log(size)).
Fallback: the whole file is read and parsed, and the same walk runs over every snapshot, whenever the fast path
cannot be sure: a small file, gzip, ``current-snapshot-id`` not in the head, a window that reached the start of the
file (a needed snapshot was not found: e.g. a parent removed by expiry). Snapshots taken from a window are decoded
exactly as a full parse decodes them, so both paths give the same answer; only the cost differs.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laketide.errors import TableNotFoundError

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.io import InputStream
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

HEAD_BYTES = 64 * 1024
PROBE_BYTES = 8 * 1024
_CURRENT = re.compile(rb'"current-snapshot-id"\s*:\s*(-?\d+|null)\s*[,}]')
_LOG_KEY = re.compile(rb'"snapshot-log"\s*:\s*\[')
# Probes tell "before the snapshot log" (a snapshot's manifest-list; a summary or property key of that name would
# be before it too) from "after its key": complete snapshot-log or metadata-log entries, whose number values no
# summary or property entry has (their values are strings).
_BEFORE_LOG = re.compile(rb'"manifest-list"\s*:')
_LOG_ENTRY = re.compile(
    rb'\{\s*"timestamp-ms"\s*:\s*\d+\s*,\s*"snapshot-id"\s*:\s*\d+\s*\}'
    rb'|\{\s*"snapshot-id"\s*:\s*\d+\s*,\s*"timestamp-ms"\s*:\s*\d+\s*\}'
    rb'|\{\s*"timestamp-ms"\s*:\s*\d+\s*,\s*"metadata-file"\s*:\s*"[^"\\]*"\s*\}'
    rb'|\{\s*"metadata-file"\s*:\s*"[^"\\]*"\s*,\s*"timestamp-ms"\s*:\s*\d+\s*\}'
)
# Where a snapshot object may start: Java writes sequence-number then snapshot-id, pyiceberg snapshot-id first.
# An unescaped '{"' cannot be inside a JSON string, so every match is the start of a real object.
_SNAPSHOT_START = re.compile(r'\{\s*(?:"sequence-number"\s*:\s*\d+\s*,\s*)?"snapshot-id"\s*:\s*(-?\d+)')


@dataclass(frozen=True)
class Snap:
    """One snapshot, as written in the metadata file."""

    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    timestamp_ms: int
    summary: dict[str, str]  # "operation" and every other key, e.g. "laketide.writer-id"


def id_text(snapshot_id: int | None) -> str | None:
    """A snapshot id as laketide writes it into JSON: a string of digits (64-bit ids lose digits in JavaScript's
    numbers, Airflow's UI among their readers)."""
    return None if snapshot_id is None else str(snapshot_id)


def id_number(snapshot_id: object) -> int | None:
    """A snapshot id read back from JSON: a string of digits, or a number (records written before ids were strings)."""
    return None if snapshot_id is None else int(str(snapshot_id))


def table_lineage(table: Table, snapshot_id: int | None) -> tuple[list[Snapshot], bool]:
    """The lineage of ``snapshot_id`` in a loaded pyiceberg table, newest first, and whether it is whole (it reaches
    a snapshot without a parent; False when expiry removed a parent). Reads the metadata already loaded."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    out: list[Snapshot] = []
    sid = snapshot_id
    while sid is not None and sid != -1:
        snapshot = by_id.get(sid)
        if snapshot is None:
            return out, False
        out.append(snapshot)
        sid = snapshot.parent_snapshot_id
    return out, True


def metadata_location(catalog: SqlCatalog, identifier: str) -> str:
    """The current metadata file of ``identifier``, from the SQL catalog's own row (no metadata parsing)."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.sql import ICEBERG_TABLE_TYPE, IcebergTables
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
    # laketide's catalog always has the v1 schema (iceberg_type column): skip views like pyiceberg does
    kind = IcebergTables.iceberg_type
    stmt = select(IcebergTables.metadata_location).where(
        IcebergTables.catalog_name == catalog.name,
        IcebergTables.table_namespace == namespace,
        IcebergTables.table_name == Catalog.table_name_from(identifier),
        (kind == ICEBERG_TABLE_TYPE) | kind.is_(None),
    )
    with Session(catalog.engine) as session:
        location = session.scalar(stmt)
    if not location:
        raise TableNotFoundError(f"Iceberg table {identifier!r} does not exist in catalog {catalog.name!r}: "
                                 "start the stream's ingest DAG once, it creates the tables")
    return location


def lineage(catalog: SqlCatalog, identifier: str, stop: Callable[[Snap], bool] | None = None,
            *, tail_bytes: int = 256 * 1024) -> tuple[int | None, list[Snap]]:
    """The current snapshot id and the current lineage, newest first, down to and including the first snapshot
    for which ``stop`` is true (or to the start of the lineage). ``(None, [])`` without snapshots.

    ``tail_bytes`` is the first window read before the snapshot log; it doubles while a needed snapshot is
    missing. ``stop`` should be a plain predicate: it sees each snapshot of the lineage once, newest first.
    """
    from pyiceberg.io import load_file_io

    if tail_bytes < 1:
        raise ValueError(f"tail_bytes must be positive, not {tail_bytes}")
    location = metadata_location(catalog, identifier)
    input_file = load_file_io(catalog.properties, location).new_input(location)
    size = len(input_file)
    out: list[Snap] = []
    with input_file.open(seekable=True) as stream:
        found = None
        if size >= 2 * tail_bytes:  # else reading it all costs about the same
            head = _read(stream, 0, HEAD_BYTES)
            found = None if head.startswith(b"\x1f\x8b") else _CURRENT.search(head)  # gzip: parse it all
        if found is None:
            current, snapshots = _parse_all(stream)
            _walk(out, current, snapshots.get, stop, complete=True)
            return current, out
        current = None if found.group(1) in (b"null", b"-1") else int(found.group(1))
        end = _window_end(stream, size, found.end(), tail_bytes)
        sid, window = current, tail_bytes
        while sid is not None and end - window > 0:
            sid = _walk(out, sid, _index(_read(stream, end - window, window)), stop, complete=False)
            window *= 2
        if sid is not None:  # the window reached the start of the file: parse it all
            _walk(out, sid, _parse_all(stream)[1].get, stop, complete=True)
    return current, out


def _walk(out: list[Snap], sid: int | None, lookup: Callable[[int], dict[str, Any] | None],
          stop: Callable[[Snap], bool] | None, *, complete: bool) -> int | None:
    """Extend ``out`` from ``sid`` along parent ids; returns the id still to find, None when the lineage is done.

    With ``complete`` (every snapshot known), a parent that is not there ends the lineage, as in pyiceberg
    (it was expired); otherwise it may lie outside the window read so far.
    """
    while sid is not None:
        raw = lookup(sid)
        if raw is None:
            return None if complete else sid
        snap = Snap(raw["snapshot-id"], raw.get("parent-snapshot-id"), raw.get("sequence-number", 0),
                    raw["timestamp-ms"], dict(raw.get("summary") or {}))
        out.append(snap)
        if stop is not None and stop(snap):
            return None
        sid = snap.parent_id
    return None


def _index(window: bytes) -> Callable[[int], dict[str, Any] | None]:
    """Snapshot lookup by id in a window of the file; only the snapshots asked for are decoded."""
    text = window.decode("utf-8", "replace")  # the window may start inside a character; no snapshot does
    starts: dict[int, list[int]] = {}
    for match in _SNAPSHOT_START.finditer(text):
        starts.setdefault(int(match.group(1)), []).append(match.start())
    decoder = json.JSONDecoder()

    def lookup(sid: int) -> dict[str, Any] | None:
        for pos in starts.get(sid, []):
            try:
                obj = decoder.raw_decode(text, pos)[0]
            except ValueError:  # cut by the window's end: a larger window or the full parse sees it whole
                continue
            # refs, statistics and snapshot-log entries also start with "snapshot-id"
            if isinstance(obj, dict) and obj["snapshot-id"] == sid and {"timestamp-ms", "manifest-list"} <= obj.keys():
                return obj
        return None

    return lookup


def _window_end(stream: InputStream, size: int, lo: int, tail_bytes: int) -> int:
    """Where the windows end: at the ``"snapshot-log"`` key, or just past it, found with a few small probes.

    A probe with a ``manifest-list`` key lies before the log, one with complete log entries lies after its key:
    gallop back from the end of the file, then bisect until the log starts in the first half of the first window.
    A probe with neither (e.g. inside a snapshot larger than a probe) gives up: the windows then end at the end
    of the file, which costs more and gives the same answer (the end is only a hint, like the window size).
    """
    hi, step, bisect = size, PROBE_BYTES, False
    while hi - lo > max(PROBE_BYTES, tail_bytes // 2):
        mid = (lo + hi) // 2 if bisect else max(lo, hi - step)
        probe = _read(stream, mid, PROBE_BYTES)
        if match := _LOG_KEY.search(probe):
            return mid + match.start()
        if _BEFORE_LOG.search(probe):
            lo, bisect = mid, True
        elif _LOG_ENTRY.search(probe):
            hi, step = mid, step * 4
        else:
            return size
    return min(size, hi + PROBE_BYTES)


def _parse_all(stream: InputStream) -> tuple[int | None, dict[int, dict[str, Any]]]:
    """The exact answer: the current snapshot id and every snapshot by id, from the whole file."""
    stream.seek(0)
    data = stream.read()
    if data.startswith(b"\x1f\x8b"):  # .gz.metadata.json (and the older .metadata.json.gz)
        data = gzip.decompress(data)
    metadata = json.loads(data)
    current = metadata.get("current-snapshot-id")
    return (None if current in (None, -1) else current), {s["snapshot-id"]: s for s in metadata.get("snapshots", [])}


def _read(stream: InputStream, offset: int, length: int) -> bytes:
    stream.seek(offset)
    return stream.read(length)


def lineage_summaries(table: Table, snapshot_id: int | None = None) -> list[dict[str, str]]:
    """The summaries of ``table``'s lineage ending at ``snapshot_id`` (default: the current one), newest first."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    sid = table.metadata.current_snapshot_id if snapshot_id is None else snapshot_id
    summaries: list[dict[str, str]] = []
    while sid is not None and (snapshot := by_id.get(sid)) is not None:
        if snapshot.summary is not None:
            summaries.append(dict(snapshot.summary.additional_properties))
        sid = snapshot.parent_snapshot_id
    return summaries
