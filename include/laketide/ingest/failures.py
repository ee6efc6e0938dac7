"""Batches that fail: named with their landing files and what to do, counted across restarts.

A micro-batch that fails stops the writer; Spark replays the same batch (same files) on the next start, so
a file that breaks the writer breaks it again on every restart. Each failure is recorded next to the
checkpoint (``<checkpoints>/<stream>.failed-batch.json``: batch id, attempts, files, error) and logged with
the files; from the second failure of the same batch on, the log says which files to move out of the
landing zone's ``data/`` folder. The record is removed when the batch commits.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laketide.config import StreamConfig

log = logging.getLogger("laketide.ingest.writer")


def record_path(stream: StreamConfig) -> Path:
    return stream.checkpoint_path.parent / f"{stream.name}.failed-batch.json"


def read(stream: StreamConfig) -> dict[str, Any] | None:
    """The recorded failure of ``stream``'s writer, if its last failed batch has not committed since."""
    path = record_path(stream)
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def _files(batch: Any, plan: bool = True) -> list[str]:
    """The batch's landing files: from its plan (``plan``: the internal commit path), else by a query."""
    from laketide.lake.internals import batch_files

    try:
        if plan:
            return [str(f) for f in batch_files(batch)]
        return sorted(str(r[0]) for r in batch.select("_source_file").distinct().collect())
    except Exception:  # the plan cannot be read (the JVM is gone): name no file rather than fail again
        return []


def record(stream: StreamConfig, batch_id: int, batch: Any, exc: BaseException, plan: bool = True) -> None:
    """Count a failure of ``batch_id`` and log it with the batch's landing files and what to do."""
    from laketide.ingest.sink import first_line

    previous = read(stream)
    attempts = previous["attempts"] + 1 if previous and previous.get("batch_id") == batch_id else 1
    files = _files(batch, plan)
    entry = {"batch_id": batch_id, "attempts": attempts, "files": files, "error": first_line(exc),
             "failed_at": datetime.now(UTC).isoformat(timespec="seconds")}
    path = record_path(stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry, indent=2))
    tmp.replace(path)
    shown = ", ".join(files[:20]) + (f" and {len(files) - 20} more" if len(files) > 20 else "")
    if attempts == 1:
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
    previous = read(stream)
    if previous is not None and previous.get("batch_id", -1) <= batch_id:
        record_path(stream).unlink(missing_ok=True)
