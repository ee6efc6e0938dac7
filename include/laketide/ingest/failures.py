"""Batches that fail: named with their landing files and what to do, counted across restarts; a stream whose batch
keeps killing the writer application is held out so that the other streams of its group go on.

A micro-batch that fails stops the writer; Spark replays the same batch (same files) on the next start, so
a file that breaks the writer breaks it again on every restart. Each failure is recorded next to the
checkpoint (``<checkpoints>/<stream>.failed-batch.json``: batch id, attempts, deaths, files, error) and logged with
the files; from the second failure of the same batch on, the log says which files to move out of the
landing zone's ``data/`` folder. The record is removed when the batch commits.

A batch can also end the whole application: its input runs the shared JVM out of memory (exit 7), and then no
Python code of the batch runs any more, nor can its plan be read. So each batch is recorded *before* its work, with
its landing files, in ``<checkpoints>/<stream>.in-flight.json`` (:func:`begin`), and forgotten when it ends in
this process (:func:`clear`, :func:`record`). A record left behind means the application died with the batch in
flight: the next start (no live writer holds the stream) folds it into the failed-batch record, counting a
**death** (:func:`died`). The rule that names the culprit, never a healthy stream of the same JVM:

* after a death, the streams that had a batch in flight replay it one at a time, before the others start
  (``laketide.ingest.group``): the first alone, each next one once the one before committed its batch. A healthy
  stream's batch commits at its turn and clears its record, so it is never in flight at two deaths in a row;
* a stream whose same batch was in flight at :data:`HOLD_OUT_AFTER` (2) deaths in a row (the second time replayed
  at its turn) is **held out** (:func:`held_out`): not started, its writer status ``held out`` with the files and
  what to do, while the other streams go on. Moving one of the named files out of ``<landing>/data/`` or deleting
  the failed-batch record lifts it (at the stream's next look, every status interval, or the next start).

A clean stop (SIGTERM, SIGINT) is not a death nor a failure: the application forgets its in-flight records then,
and a batch the stop cuts short (:func:`cut_by_stop`) is not recorded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laketide.errors import CheckpointMismatchError, LaketideError, WriterFencedError

if TYPE_CHECKING:
    from laketide.config import StreamConfig

log = logging.getLogger("laketide.ingest.writer")
#: deaths of the application with the same batch of a stream in flight, in a row, after which it is held out
HOLD_OUT_AFTER = 2
#: set while the writer application of this process stops on a signal (:mod:`laketide.ingest.group`)
_stop = threading.Event()


def record_path(stream: StreamConfig) -> Path:
    return stream.checkpoint_path.parent / f"{stream.name}.failed-batch.json"


def in_flight_path(stream: StreamConfig) -> Path:
    return stream.checkpoint_path.parent / f"{stream.name}.in-flight.json"


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(owner: str) -> bool:
    """Whether ``owner`` (host:pid) is a process still running on this host (a stopped one counts: it can wake)."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie (dead, not yet reaped by its parent) is dead
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    return True


def read(stream: StreamConfig) -> dict[str, Any] | None:
    """The recorded failure of ``stream``'s writer, if its last failed batch has not committed since."""
    return _load(record_path(stream))


def _files(batch: Any, plan: bool = True) -> list[str]:
    """The batch's landing files: from its plan (``plan``: the internal commit path), else by a query."""
    from laketide.lake.internals import batch_files

    try:
        if plan:
            return [str(f) for f in batch_files(batch)]
        return sorted(str(r[0]) for r in batch.select("_source_file").distinct().collect())
    except Exception:  # the plan cannot be read (the JVM is gone): name no file rather than fail again
        return []


def jvm_gone(exc: BaseException | None) -> bool:
    """``exc`` (or an error it was raised from) says the Spark JVM went away: py4j lost its connection."""
    from py4j.protocol import Py4JNetworkError

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (Py4JNetworkError, ConnectionError)) or "Answer from Java side is empty" in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def stop_asked(asked: bool = True) -> None:
    """The writer application of this process was asked to stop (a signal), or starts (``asked=False``)."""
    if asked:
        _stop.set()
    else:
        _stop.clear()


def cut_by_stop(exc: BaseException, wait: float = 1.0) -> bool:
    """Whether ``exc`` ended a batch because the application is stopping, not because of the batch. A stop of the
    whole process group (``kill -- -PGID``) ends the JVM too, and a batch's thread can see the JVM go before the
    main thread runs the signal's handler: after a py4j error the stop is waited for up to ``wait`` seconds. A
    laketide error (bad input, a fenced writer) is the batch's own, stop or not."""
    from py4j.protocol import Py4JError

    if isinstance(exc, LaketideError):
        return False
    return _stop.is_set() or ((isinstance(exc, Py4JError) or jvm_gone(exc)) and _stop.wait(wait))


def _shown(files: list[str]) -> str:
    return ", ".join(files[:20]) + (f" and {len(files) - 20} more" if len(files) > 20 else "")


def record(stream: StreamConfig, batch_id: int, batch: Any, exc: BaseException, plan: bool = True) -> None:
    """Count a failure of ``batch_id`` and log it with the batch's landing files and what to do."""
    from laketide.ingest.sink import first_line

    previous = read(stream)
    same = previous is not None and previous.get("batch_id") == batch_id
    attempts = previous["attempts"] + 1 if previous and same else 1
    flight = _load(in_flight_path(stream))
    files = _files(batch, plan) or (flight or {}).get("files") or ((previous or {}).get("files") if same else []) or []
    entry = {"batch_id": batch_id, "attempts": attempts, "deaths": (previous or {}).get("deaths", 0) if same else 0,
             "files": files, "error": first_line(exc), "failed_at": datetime.now(UTC).isoformat(timespec="seconds")}
    path = record_path(stream)
    _save(path, entry)
    if not jvm_gone(exc):  # the driver saw the failure: the batch is not in flight any more
        _end(stream, batch_id)
    shown = _shown(files)
    if isinstance(exc, CheckpointMismatchError | WriterFencedError):  # not its input: replaying it changes nothing
        log.error("batch %d of stream %s stopped: %s (recorded in %s). Its landing files (%s) are not the cause: do "
                  "what the message says.", batch_id, stream.name, exc, path, shown or "unknown")
    elif attempts == 1:
        log.error("batch %d of stream %s failed: %s. Its landing files: %s. The writer stops; the batch is "
                  "replayed from the checkpoint when it starts again (recorded in %s).",
                  batch_id, stream.name, entry["error"], shown or "(unknown)", path)
    else:
        log.error("batch %d of stream %s failed %d times in a row: %s. Its landing files: %s. If a file is "
                  "the cause, move it out of %s/data/ (nothing of this batch is committed; re-publish it fixed, "
                  "under a new name, with its audit) and restart the writer; see the operations guide, "
                  "'A batch that keeps failing'.", batch_id, stream.name, attempts, entry["error"],
                  shown or "(unknown)", stream.landing_path)


def clear(stream: StreamConfig, batch_id: int) -> None:
    """Forget the recorded failure once ``batch_id`` (or a later batch) committed."""
    _end(stream, batch_id)
    previous = read(stream)
    if previous is not None and previous.get("batch_id", -1) <= batch_id:
        record_path(stream).unlink(missing_ok=True)


# ---------------------------------------------------------------- batches in flight, deaths, held-out streams


def begin(stream: StreamConfig, batch_id: int, batch: Any) -> None:
    """Record that ``batch_id`` is in flight, with its landing files (read from its plan, which costs no pass over
    the rows), before any of its work: if the application dies during it, the next start names them."""
    entry = {"batch_id": batch_id, "files": _files(batch), "owner": _owner(),
             "started_at": datetime.now(UTC).isoformat(timespec="seconds")}
    _save(in_flight_path(stream), entry)


def _end(stream: StreamConfig, batch_id: int | None = None) -> None:
    """Forget this process's in-flight record of ``stream`` (of ``batch_id``, or any); another process's is kept (a
    writer that overtook a frozen one records its own batches in the same place)."""
    path = in_flight_path(stream)
    flight = _load(path)
    if flight is not None and flight.get("owner") == _owner() and batch_id in (None, flight.get("batch_id")):
        path.unlink(missing_ok=True)


def forget(stream: StreamConfig) -> None:
    """The application stopped on request (a signal): a batch it had in flight is not a death."""
    _end(stream)


def died(stream: StreamConfig) -> dict[str, Any] | None:
    """Called at a start, when no live writer holds ``stream``: the batch a dead application had in flight (its
    in-flight record), folded into the failed-batch record with one more death (the same batch id in flight at
    the deaths before: counted on, else from 1); None when the last application did not die with a batch in
    flight."""
    path = in_flight_path(stream)
    flight = _load(path)
    if flight is None:
        path.unlink(missing_ok=True)  # unreadable (cut short): nothing to name
        return None
    batch_id = int(flight["batch_id"])
    if _alive(str(flight.get("owner", ""))):  # overtaken while frozen or cut off, not dead: its batch is fenced
        log.warning("stream %s: batch %s was in flight in process %s, which is alive but lost its lease (frozen? "
                    "cut off?); not counted as a death: the batch is replayed here and the old process's commit "
                    "is fenced", stream.name, batch_id, flight.get("owner"))
        path.unlink(missing_ok=True)
        return None
    previous = read(stream)
    same = previous is not None and previous.get("batch_id") == batch_id
    before = previous or {}
    entry: dict[str, Any] = {"batch_id": batch_id, "attempts": (before.get("attempts", 0) if same else 0) + 1,
             "deaths": (before.get("deaths", 0) if same else 0) + 1,
             "files": flight.get("files") or (before.get("files") if same else []) or [],
             "error": f"the writer application died (its Spark JVM went away: out of memory? killed?) while batch "
                      f"{batch_id} of stream {stream.name} was in flight (started {flight.get('started_at')}, "
                      f"process {flight.get('owner')})",
             "failed_at": datetime.now(UTC).isoformat(timespec="seconds")}
    _save(record_path(stream), entry)
    path.unlink(missing_ok=True)
    log.error("stream %s: %s; its landing files: %s (death %d of this batch in a row; recorded in %s)", stream.name,
              entry["error"], _shown(entry["files"]) or "(unknown)", entry["deaths"], record_path(stream))
    return entry


def held_out(stream: StreamConfig) -> dict[str, Any] | None:
    """The failed-batch record of ``stream`` when the stream is held out: its batch was in flight at
    :data:`HOLD_OUT_AFTER` deaths of the application in a row and every file it names is still in
    ``<landing>/data/``. Once a named file is gone from there (or the record deleted) it is not: the death count
    is reset and the stream starts (it replays the batch)."""
    from laketide.ingest.landing import data_dir

    entry = read(stream)
    if entry is None or entry.get("deaths", 0) < HOLD_OUT_AFTER:
        return None
    folder = data_dir(stream.landing_path)
    files = [str(f) for f in entry.get("files") or []]
    if files and not all((folder / name).exists() for name in files):
        log.warning("stream %s: a landing file of batch %s that killed the writer application is gone from %s: the "
                    "stream is no longer held out, it replays the batch", stream.name, entry.get("batch_id"), folder)
        _save(record_path(stream), {**entry, "deaths": 0})
        return None
    return entry


def hold_out_reason(stream: StreamConfig, entry: dict[str, Any]) -> str:
    """What the status, the log and the lakehouse view say about a held-out stream: the files, what to do."""
    from laketide.ingest.landing import data_dir

    files = [str(f) for f in entry.get("files") or []]
    return (f"batch {entry.get('batch_id')} was in flight each of the last {entry.get('deaths')} times "
            f"the writer application died (its Spark JVM went away: out of memory?), the last time replayed at its "
            f"turn; its landing files: {_shown(files) or '(unknown)'}. Move them out of "
            f"{data_dir(stream.landing_path)}/ "
            "(nothing of the batch is committed), re-publish them fixed under new names with their audit; the "
            f"stream starts again once a named file is gone from there, or once {record_path(stream)} is deleted "
            f"(then restart the writer). The other streams of group {stream.writer_group} go on.")
