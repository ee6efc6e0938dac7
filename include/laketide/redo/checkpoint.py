"""The writer's Structured Streaming checkpoint rebuilt at a table position, and swapped in by renames.

A redo moves the events table back to a snapshot S whose writer batch is ``B_S``. The checkpoint must then say
the same: Spark's file source has seen exactly the landing files of S's position, and batch ``B_S`` is the
last one planned and finished. The writer started on it then plans batch ``B_S + 1`` with the files landed
since (the redo's re-ingest), and later the live stream goes on from there: nothing twice, nothing skipped.

This writes Spark 3.5's checkpoint files (format ``v1``, which Spark 3.x has kept): ``metadata`` (the query id,
kept from the old checkpoint), ``offsets/<B-1>`` and ``offsets/<B>`` (Spark needs the two latest to restart),
``commits/<B>`` and one file-source log file ``sources/0/0`` listing the files seen. The old checkpoint is kept
beside it as ``<checkpoint>.redo-<run id>``. Non-public formats: :func:`check_format` refuses a checkpoint
whose files are not ``v1``, so that a Spark upgrade fails loudly here instead of corrupting the stream.
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

from laketide.lake import checkpoint_log
from laketide.lake.checkpoint_log import VERSION, check_format, file_name, log_files
from laketide.lake.file_stats import FileStat, file_stat

log = logging.getLogger("laketide.redo.checkpoint")
DEFAULT_OFFSET_METADATA = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}


def source_entries(checkpoint: Path) -> dict[str, dict[str, Any]]:
    """Every file Spark's file source recorded in ``checkpoint`` (all log files, compacted or not), by file name."""
    return {file_name(entry): entry for entry in checkpoint_log.source_entries(checkpoint)}


def _offset_metadata(checkpoint: Path) -> dict[str, Any]:
    files = log_files(checkpoint / "offsets")
    if files:
        lines = check_format(files[-1])
        if lines:
            meta = json.loads(lines[0])
            if isinstance(meta, dict):
                return meta
    return dict(DEFAULT_OFFSET_METADATA)


def build(old: Path | None, target: Path, batch_id: int | None, position: dict[str, FileStat | None],
          data_dir: Path) -> int:
    """Write a checkpoint at ``target`` whose last finished batch is ``batch_id`` and whose file source has seen
    the files of ``position`` (names in ``data_dir``). Entries of ``old`` (the checkpoint being replaced) are kept
    verbatim for those files; others are written as Spark lists them. Returns the number of files listed.
    ``batch_id`` None: an empty checkpoint (the writer starts at batch 0)."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    meta_file = None if old is None else old / "metadata"
    query_id = None
    if meta_file is not None and meta_file.is_file():
        query_id = json.loads(meta_file.read_text()).get("id")
    (target / "metadata").write_text(json.dumps({"id": query_id or str(uuid.uuid4())}, separators=(",", ":")))
    if batch_id is None:
        return 0
    known = {} if old is None else source_entries(old)
    entries: list[dict[str, Any]] = []
    for name in sorted(position):
        if name in known:
            entry = dict(known[name])
        else:
            path = data_dir / name
            if not path.is_file():
                continue  # deleted after ingest: Spark no longer lists it
            entry = {"path": path.resolve().as_uri(), "timestamp": file_stat(path).mtime_ms}
        entry["batchId"] = 0
        entries.append(entry)
    sources = target / "sources" / "0"
    sources.mkdir(parents=True)
    (sources / "0").write_text("\n".join([VERSION, *(json.dumps(e, separators=(",", ":")) for e in entries)]))
    meta = _offset_metadata(old) if old is not None else dict(DEFAULT_OFFSET_METADATA)
    offsets, commits = target / "offsets", target / "commits"
    offsets.mkdir()
    commits.mkdir()
    for batch in sorted({max(0, batch_id - 1), batch_id}):
        (offsets / str(batch)).write_text("\n".join([VERSION, json.dumps(meta, separators=(",", ":")),
                                                     json.dumps({"logOffset": 0})]))
    (commits / str(batch_id)).write_text("\n".join([VERSION, json.dumps({"nextBatchWatermarkMs": 0})]))
    return len(entries)


def backup_path(checkpoint: Path, run_id: str) -> Path:
    return checkpoint.with_name(f"{checkpoint.name}.redo-{run_id}")


def building_path(checkpoint: Path, run_id: str) -> Path:
    return checkpoint.with_name(f"{checkpoint.name}.redo-{run_id}.new")


def replace(checkpoint: Path, run_id: str, batch_id: int | None, position: dict[str, FileStat | None],
            data_dir: Path) -> Path:
    """Rebuild ``checkpoint`` at a position and swap it in; return where the old one is kept.

    Crash-safe by renames: the new checkpoint is built beside it; the first run of ``run_id`` moves the old one
    to ``<checkpoint>.redo-<run_id>`` (kept), a re-run finds it there (the checkpoint in place is then one an
    earlier attempt built, and is dropped); the new one is renamed into place last. Killed anywhere, a re-run
    with the same run id ends in the same state.
    """
    backup = backup_path(checkpoint, run_id)
    built = building_path(checkpoint, run_id)
    source = backup if backup.exists() else (checkpoint if checkpoint.exists() else None)
    count = build(source, built, batch_id, position, data_dir)
    if not backup.exists() and checkpoint.exists():
        checkpoint.rename(backup)
    elif checkpoint.exists():
        shutil.rmtree(checkpoint)
    built.rename(checkpoint)
    log.info("checkpoint %s rebuilt at batch %s (%d files seen); the old one is kept as %s", checkpoint, batch_id,
             count, backup)
    return backup
