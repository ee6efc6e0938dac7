"""Closed hours' landing files moved out of the writer's way: ``data/`` + ``audit/`` -> ``archive/<hour>/``.

Spark's file source lists the whole of ``data/`` at every trigger, and so do the triggerer's backlog look and the
late-file look: a stream landing a file every 10 s would make each of them list three million files after a year.
Once an hour is closed (verified: every landing file of it ingested, audit == lake + rejects), its files are never
read by the writer again, so they leave ``data/`` for their hour's archive folder (``landing.hour_archive``), data
file first, then its audit record. What reads an hour's landing files (its verification, reconcile, backfill, redo)
reads ``data/`` and then that hour's archive folder (``landing.read_audits(archived=...)``, ``inspection.inspect``,
``landing.landed_path``), so a file is found whatever the moment of its move.

A file of a closed hour is archived when the writer is done with it for good:

* its entry in the writer's file-source log is in a batch the query finished (``commits/``): a restart never reads
  it again (a batch planned but not finished is read again on restart, so its files stay);
* or it has no entry there (the log drops entries after ``source_log_retention``: a zone older than that, archived
  for the first time) and it reached ``data/`` before the hour's close: the close's verification found it ingested.

A file that landed after the close (late, not taken yet) stays until the hour's next close. Files without a
contract name (no hour), hidden and empty files are never moved: the verification reports them where they are.

One sweep at a time per landing zone (a lock file in ``archive/``), none while a backfill reads the zone's files (it
holds the same lock: Spark reads a file at the path it was given), and none while a redo holds the stream: a redo
moves the files it re-ingests back into ``data/`` (:func:`restore`), after waiting for a sweep under way.
Each close (and re-close) of an hour archives that hour's files (:func:`archive_closed`); ``./laketide archive``
sweeps every closed hour (an existing landing zone's history, once; ``--dry-run``: what it would move).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from laketide.config import LaketideConfig, StreamConfig
from laketide.ingest.faultpoints import maybe_pause
from laketide.ingest.inspection import Landed, landed_files
from laketide.ingest.landing import (
    archive_dir,
    audit_dir,
    audit_name,
    data_dir,
    hidden,
    hour_archive,
    move_files,
    name_hour,
    stray_audits,
)
from laketide.lake.checkpoint_log import committed_source_batch, file_name, log_files, log_lines, source_log
from laketide.lake.hours import partition_key

log = logging.getLogger(__name__)

LOCK = ".lock"
#: why a sweep skipped a landing zone whose archive lock another process holds
LOCKED = "another archive sweep, or a backfill reading its files, holds this landing zone's archive lock"


@contextlib.contextmanager
def archive_lock(landing_path: str | Path, *, wait: bool) -> Iterator[bool]:
    """Hold the landing zone's archive lock while in the block (yields True), or yield False at once when another
    process holds it and ``wait`` is false."""
    folder = archive_dir(landing_path)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield False
                return
            log.info("waiting for the archive lock of %s: an archive sweep or a backfill of this landing zone holds "
                     "it", landing_path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class ArchiveResult:
    """What one sweep of a stream's landing zone did (or would do: ``dry_run``)."""

    stream: str
    #: files moved (or to move) per hour (partition key)
    moved: dict[str, int] = field(default_factory=dict)
    #: files of closed hours left in ``data/``, per hour, with why (a late file, a batch not finished)
    kept: dict[str, int] = field(default_factory=dict)
    #: why nothing was looked at (archiving off, a redo holds the stream, another sweep or a backfill runs), or None
    skipped: str | None = None
    dry_run: bool = False

    def line(self) -> str:
        if self.skipped:
            return f"{self.stream}: archive skipped: {self.skipped}"
        verb = "would move" if self.dry_run else "moved"
        total = sum(self.moved.values())
        left = sum(self.kept.values())
        return (f"{self.stream}: {verb} {total} landing file(s) of {len(self.moved)} closed hour(s) into the archive"
                + (f"; {left} file(s) of closed hours left in data/ (not finished by the writer yet)" if left else ""))


def closed_hours(config: LaketideConfig, stream: StreamConfig) -> dict[str, datetime]:
    """The hours of ``stream`` whose last status record is a close, with the time of that close."""
    from laketide.close.status import State, history

    last: dict[datetime, tuple[State, datetime]] = {}
    for rec in history(config, stream.name):
        last[rec.partition] = (rec.state, rec.recorded_at)
    return {partition_key(hour): at for hour, (state, at) in last.items() if state == State.CLOSED}


def source_batches(checkpoint: Path, names: Collection[str]) -> dict[str, int]:
    """The file-source log batch of each of ``names`` the writer's log holds (a name read in several batches: the
    latest). Lines are parsed only when they may name one of them: the log can hold hundreds of thousands."""
    stamps = {name.split("-", 1)[0] for name in names}
    wanted = set(names)
    found: dict[str, int] = {}
    for path in log_files(source_log(checkpoint)):
        for line in log_lines(path):
            if not line.strip() or not any(stamp in line for stamp in stamps):
                continue
            entry = json.loads(line)
            if (name := file_name(entry)) in wanted:
                found[name] = max(found.get(name, -1), int(entry["batchId"]))
    return found


def archivable(stream: StreamConfig, closed: dict[str, datetime], files: list[Landed]) -> tuple[list[Landed],
                                                                                                list[Landed]]:
    """The landing files of closed hours the writer is done with for good (see the module's doc), and those of
    closed hours it is not done with yet."""
    candidates = [f for f in files if f.hour in closed and name_hour(f.name) is not None]
    if not candidates:
        return [], []
    checkpoint = Path(stream.checkpoint_path)
    finished = committed_source_batch(checkpoint) if (checkpoint / "commits").is_dir() else None
    batches = source_batches(checkpoint, [f.name for f in candidates])
    done: list[Landed] = []
    waiting: list[Landed] = []
    for f in candidates:
        assert f.hour is not None
        batch = batches.get(f.name)
        if batch is not None:
            ok = finished is not None and batch <= finished
        else:
            ok = f.landed_ms < int(closed[f.hour].timestamp() * 1000)
        (done if ok else waiting).append(f)
    return done, waiting


def redo_holds(config: LaketideConfig, stream: StreamConfig) -> str | None:
    """A description of a live redo holding ``stream``'s writer lease, or None."""
    from laketide.lake.lease import engine_for, live_redo

    engine = engine_for(config.catalog)
    try:
        return live_redo(engine, stream.writer_id, stream.writer_lease)
    finally:
        engine.dispose()  # one look per close: no pool left open on the catalog's database


def archive_closed(config: LaketideConfig, stream: StreamConfig, hours: dict[str, datetime] | None = None, *,
                   dry_run: bool = False) -> ArchiveResult:
    """Move the landing files of ``stream``'s closed hours the writer is done with into their archive folders
    (nothing moved with ``dry_run``): of ``hours`` (partition key -> time of its close; the close of an hour passes
    its own), or of every hour whose last status record is a close (None: the sweep of ``./laketide archive``).
    Idempotent; skipped (and said so) when ``archive_closed_hours`` is off, a redo holds the stream, or another
    sweep or a backfill holds the landing zone's archive lock."""
    result = ArchiveResult(stream.name, dry_run=dry_run)
    if not stream.archive_closed_hours and not dry_run:
        result.skipped = f"streams[{stream.name}].archive_closed_hours is false"
        return result
    if not data_dir(stream.landing_path).is_dir():
        return result
    with archive_lock(stream.landing_path, wait=False) as locked:
        if not locked:
            result.skipped = LOCKED
            return result
        if (redo := redo_holds(config, stream)) is not None:
            result.skipped = f"a redo holds the stream ({redo}); its hours are archived at their next close"
            return result
        closed = closed_hours(config, stream) if hours is None else hours
        done, waiting = archivable(stream, closed, landed_files(stream.landing_path))
        for f in waiting:
            assert f.hour is not None
            result.kept[f.hour] = result.kept.get(f.hour, 0) + 1
        hour_of = {f.name: f.hour for f in done}
        if not dry_run:  # the audit records an earlier move left behind when it was cut off, first
            stray_moved(stream)

        def between() -> None:  # every data file moved, no audit record yet (a fault-injection test kills here)
            maybe_pause("archive_audits", 0, stream.name)

        for name in list(hour_of) if dry_run else move_files(stream.landing_path, hour_of, to_archive=True,
                                                              between=between):
            hour = hour_of[name]
            assert hour is not None
            result.moved[hour] = result.moved.get(hour, 0) + 1
    if result.moved or result.kept:
        log.info("%s", result.line())
    return result


def stray_moved(stream: StreamConfig) -> int:
    """Move into the archive the audit records whose data file is there already (a sweep killed between its two
    renames); return how many."""
    strays = stray_audits(stream.landing_path)
    for name in strays:
        hour = name_hour(name)
        assert hour is not None
        os.rename(audit_dir(stream.landing_path) / audit_name(name), hour_archive(stream.landing_path, hour)
                  / audit_name(name))
    if strays:
        log.info("%s: %d audit record(s) left in audit/ by a cut-off move, moved beside their data files",
                 stream.name, len(strays))
    return len(strays)


def restore(landing_path: str | Path, names: Collection[str]) -> int:
    """Move the archived files among ``names`` back into ``data/`` (a redo re-ingests them); return how many moved.
    Waits for an archive sweep under way first (the caller holds the stream's lease, so no new sweep starts)."""
    with archive_lock(landing_path, wait=True):
        archived = [n for n in names if name_hour(n) is not None and not hidden(n)
                    and not (data_dir(landing_path) / n).exists()]
        return len(move_files(landing_path, archived, to_archive=False))
