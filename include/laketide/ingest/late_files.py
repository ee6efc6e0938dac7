"""Landing files with an old modification time: ingested anyway, by refreshing that time.

Spark's file source remembers the files it has taken for ``max_file_age`` (its ``maxFileAge``) behind the newest
taken file's modification time, which bounds the writer's memory, and it skips, without a word and for ever, a
file whose modification time is older than that horizon: a file copied with its times (``cp -p``, ``rsync -t``,
an object-store sync) that lands after newer ones. :class:`LateFiles` finds such files between batches and sets
their modification time to now (``os.utime``, the content untouched), so that the next batch takes them; each is
logged by name with its old time.

Why this is safe (a file is never taken twice):

* only a file whose modification time is older than the horizon is touched, and the horizon is read from the
  source's own log (the newest time it holds, less ``max_file_age``): never later than the horizon Spark applies,
  so Spark would skip the file at every listing. A file in Spark's cache of listed files (a backlog) was newer
  than the horizon when listed and stays so: files are taken oldest first, so the horizon never passes them;
* a file the log holds is never touched. Spark forgets a taken file from memory once it is older than the
  horizon; its log keeps the entry for ``source_log_retention`` (below), and a file older than that is never
  touched either;
* the log is read in full only when a file could need it: a file that landed (its status-change time, set by the
  rename or copy into ``data/``) since the last look, with a modification time older than the horizon. A
  ``chmod -R`` over the landing zone makes every file such a candidate once: all are found in the log (or are
  older than the retention), none is touched. The time of the last look is kept in the checkpoint
  (:data:`LOOKED_FILE`), so a restarted writer goes on from it.

The log is bounded: Spark keeps an entry per file ever read, compacted every ten batches into one file that it
rewrites whole (173 MB after 300,000 files). After each look, :meth:`SourceHorizon.prune` rewrites the newest
compacted file once without the entries older than ``source_log_retention`` behind the newest one (and only those
of log batches the query has finished, which no restart reads again). Spark itself forgets them: on restart it
purges every entry older than ``max_file_age`` (no longer than the retention) behind the newest, and its next
compaction carries the shorter file forward. The price is one rule: a candidate older than the retention cannot
be told apart from a copy of a file read before, so it is not touched but named once, with what to do (set its
modification time to now by hand).

Stdlib only; the writer's driver calls :meth:`LateFiles.rescue` before its stream starts and every trigger interval.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laketide.config import StreamConfig
from laketide.config.values import millis
from laketide.errors import CheckpointFormatError
from laketide.ingest.columns import human
from laketide.ingest.inspection import Landed, landed_files
from laketide.ingest.landing import data_dir
from laketide.lake.checkpoint_log import committed_source_batch, file_name, log_files, prune, source_entries, source_log

log = logging.getLogger("laketide.ingest.late_files")

#: how far before the last look a file's status-change time may lie and still count as landed since (clock and
#: file-system timestamp granularity)
SLACK_MS = 2_000
#: the file in the checkpoint folder (beside Spark's own) that keeps the time of the writer's last look
LOOKED_FILE = "laketide-late-files.json"


@dataclass
class SourceHorizon:
    """The newest modification time in the file source's log, read incrementally (each log file once); the newest
    compacted log file is rewritten once without the entries older than ``retention_ms`` behind it (:meth:`prune`)."""

    checkpoint: Path
    retention_ms: int
    newest_ms: int | None = None
    _read: set[str] = field(default_factory=set)
    _pruned: str | None = None

    def refresh(self) -> int | None:
        """The newest modification time of a taken file (None: the source has taken nothing yet)."""
        present = log_files(source_log(self.checkpoint))
        for path in present:
            if path.name in self._read:
                continue
            for entry in source_entries(self.checkpoint, [path]):
                stamp = int(entry["timestamp"])
                self.newest_ms = stamp if self.newest_ms is None else max(self.newest_ms, stamp)
            self._read.add(path.name)
        self._read &= {p.name for p in present}  # Spark deletes log files once compacted: forget them too
        return self.newest_ms

    def prune(self) -> int:
        """Rewrite the newest compacted log file, once, without the entries older than the retention behind the
        newest time, except those of log batches the query has not finished; return how many were dropped."""
        compacted = [p for p in log_files(source_log(self.checkpoint)) if p.name.endswith(".compact")]
        if not compacted or compacted[-1].name == self._pruned or self.newest_ms is None:
            return 0
        finished = committed_source_batch(self.checkpoint)
        if finished is None:
            return 0
        forget_before_ms = self.newest_ms - self.retention_ms

        def keep(entry: dict[str, Any]) -> bool:
            return int(entry["timestamp"]) >= forget_before_ms or int(entry["batchId"]) >= finished

        dropped = prune(compacted[-1], keep)
        self._pruned = compacted[-1].name
        if dropped:
            log.info("file source log %s: dropped %d %s older than the retention", compacted[-1], dropped,
                     "entry" if dropped == 1 else "entries")
        return dropped


@dataclass
class LateFiles:
    """The late-file rescue of one stream's writer (see the module docstring)."""

    stream: StreamConfig
    horizon: SourceHorizon = field(init=False)
    #: files that landed before this (ms since the epoch, less ``SLACK_MS``) have been looked at; kept in the
    #: checkpoint (:data:`LOOKED_FILE`) so that a restarted writer goes on from there
    looked_until_ms: int | None = None
    #: files named as older than the retention, with their landing time: named once per landing by this process
    _named: dict[str, int] = field(default_factory=dict)
    #: every file found older than the retention and still so, with its landing time: kept in the checkpoint
    #: (:data:`LOOKED_FILE`) so that a restarted writer names them again, and the status counts them as not
    #: committed (:func:`too_old_files`)
    too_old: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.horizon = SourceHorizon(self.stream.checkpoint_path, millis(self.stream.source_log_retention))

    @property
    def looked_file(self) -> Path:
        return self.stream.checkpoint_path / LOOKED_FILE

    def since_ms(self) -> int:
        """Files that landed (status-change time) from this on have not been looked at yet."""
        return (self.looked_until_ms or 0) - SLACK_MS

    def candidates(self, files: list[Landed], horizon_ms: int) -> list[Landed]:
        """Files Spark's source will skip if it never took them: older than the horizon, landed since the last look."""
        since = self.since_ms()
        return [f for f in files if f.mtime_ms < horizon_ms and f.landed_ms >= since]

    def rescue(self) -> list[str]:
        """Set the modification time of every landed file the source would skip for ever to now; return their names.

        A checkpoint log in an unknown format, or a file that cannot be touched (a read-only landing zone), is
        logged and left: the file then stays pending, and the close's verification names it."""
        started_ms = int(time.time() * 1000)
        restarted = self.too_old is None
        if self.looked_until_ms is None or self.too_old is None:
            looked, too_old = _read_looked(self.looked_file)
            self.looked_until_ms = looked if self.looked_until_ms is None else self.looked_until_ms
            self.too_old = too_old
        try:
            newest = self.horizon.refresh()
        except (CheckpointFormatError, OSError, ValueError, KeyError) as exc:
            log.error("stream %s: cannot read the file source's log in %s (%s): files landed with an old "
                      "modification time are not looked for", self.stream.name, self.stream.checkpoint_path, exc)
            return []
        if newest is None:  # nothing taken yet: Spark's horizon is 0, it skips no file
            return []
        rescued = self._look(newest, restarted)
        self.looked_until_ms = started_ms
        _write_looked(self.looked_file, started_ms, self.too_old)
        try:  # after the look: a file is checked against the log as it was when the file landed
            self.horizon.prune()
        except (CheckpointFormatError, OSError, ValueError, KeyError) as exc:
            log.error("stream %s: the file source's log in %s was not pruned (%s)", self.stream.name,
                      self.stream.checkpoint_path, exc)
        return rescued

    def _look(self, newest: int, restarted: bool = False) -> list[str]:
        horizon_ms = newest - millis(self.stream.max_file_age)
        forgotten_ms = newest - millis(self.stream.source_log_retention)
        files = landed_files(self.stream.landing_path)
        candidates = self.candidates(files, horizon_ms)
        known = self.too_old or {}
        # still there, landed at the same time, still too old: the files named before (again at a restart)
        self.too_old = {f.name: f.landed_ms for f in files
                        if known.get(f.name) == f.landed_ms and f.mtime_ms < forgotten_ms}
        if restarted:
            listed = {f.name for f in candidates}
            candidates += [f for f in files if f.name in self.too_old and f.name not in listed]
        self._named = {name: landed for name, landed in self._named.items()
                       if landed >= self.since_ms() or name in self.too_old}
        if not candidates:
            return []
        rescued: list[str] = []
        wanted = {f.name for f in candidates}
        taken = {file_name(e) for e in source_entries(self.stream.checkpoint_path) if file_name(e) in wanted}
        now_ns = time.time_ns()
        folder = data_dir(self.stream.landing_path)
        for f in candidates:
            if f.name in taken:
                continue
            if f.mtime_ms < forgotten_ms:
                self.too_old[f.name] = f.landed_ms
                if self._named.get(f.name) == f.landed_ms:
                    continue
                self._named[f.name] = f.landed_ms
                log.warning("stream %s: landing file %s landed with a modification time of %s, older than the "
                            "file source's log remembers the files read (source_log_retention %s behind its "
                            "newest file): it may be a copy of a file ingested before, so it is not ingested; if "
                            "it is new, set its modification time to now (touch %s) and the next batch ingests "
                            "it", self.stream.name, f.name, _iso(f.mtime_ms), human(self.stream.source_log_retention),
                            folder / f.name)
                continue
            path = folder / f.name
            try:
                os.utime(path, ns=(path.stat().st_atime_ns, now_ns))
            except OSError as exc:
                log.error("stream %s: landing file %s has a modification time (%s) older than the file source "
                          "remembers (max_file_age %s behind its newest file) and could not be refreshed (%s): "
                          "it will not be ingested; touch it by hand", self.stream.name, f.name,
                          _iso(f.mtime_ms), human(self.stream.max_file_age), exc)
                continue
            rescued.append(f.name)
            log.warning("stream %s: landing file %s landed with a modification time of %s, older than the file "
                        "source remembers (max_file_age %s behind its newest file, which would skip it for ever): "
                        "its modification time is now the time it is read, and the next batch ingests it",
                        self.stream.name, f.name, _iso(f.mtime_ms), human(self.stream.max_file_age))
        return rescued


def _read_looked(path: Path) -> tuple[int, dict[str, int]]:
    """The time of a previous writer's last look (0: none, or unreadable: every old file is looked at again) and
    the files it found older than the retention, with their landing times."""
    try:
        data = json.loads(path.read_text())
        looked = int(data["looked_until_ms"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0, {}
    too_old = data.get("too_old") if isinstance(data, dict) else None
    if not isinstance(too_old, dict):
        return looked, {}
    return looked, {str(n): int(t) for n, t in too_old.items() if isinstance(t, int)}


def too_old_files(stream: StreamConfig) -> dict[str, int]:
    """The landing files the writer of ``stream`` last found older than ``source_log_retention`` (it never takes
    them), with their landing times (ms): kept in the checkpoint by :class:`LateFiles`; empty when none or unknown."""
    return _read_looked(stream.checkpoint_path / LOOKED_FILE)[1]


def _write_looked(path: Path, looked_ms: int, too_old: dict[str, int] | None = None) -> None:
    """Keep the time of this look and the files older than the retention (a temporary file per process, renamed
    over the last one: two writers of the stream at once each leave a whole file). Not kept (logged): the next
    writer looks at every old file again."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(json.dumps({"looked_until_ms": looked_ms, "too_old": dict(sorted((too_old or {}).items()))}))
        os.replace(temp, path)
    except OSError as exc:
        log.warning("the time of the late-file look was not kept in %s (%s): a restarted writer looks at every "
                    "file again", path, exc)
        temp.unlink(missing_ok=True)


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def file_source_options(stream: StreamConfig) -> dict[str, str]:
    """The options of the writer's file source that this module's reasoning depends on."""
    return {"maxFileAge": f"{millis(stream.max_file_age)}ms", "latestFirst": "false"}

