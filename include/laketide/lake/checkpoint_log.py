"""Spark's Structured Streaming checkpoint logs as files: the one place that reads their format (and prunes the
file source's log, :func:`prune`).

Each log (``offsets/``, ``commits/``, the file source's ``sources/0/``) is a folder of files named by batch id
(``N``, and for the file source ``N.compact`` every ten batches); each file is a version line, ``v1`` in Spark
3.x, then one JSON value per line. Non-public formats: :func:`check_format` refuses another version, so that a
Spark upgrade fails loudly instead of being misread.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from laketide.errors import CheckpointFormatError

VERSION = "v1"
#: the end of the name of a log file being rewritten by :func:`prune` (hidden: Spark's log and this module skip it)
PRUNE_SUFFIX = ".laketide-prune"


def check_format(path: Path) -> list[str]:
    """The lines of a checkpoint log file after its version line; raises unless the version is ``v1``."""
    return list(log_lines(path))


def log_lines(path: Path) -> Iterator[str]:
    """The lines of a checkpoint log file after its version line, one at a time; raises (when the first line is
    read) unless the version is ``v1``. A compacted file-source log holds a line per file the stream ever read
    (173 MB after 300,000 files): read whole, it would cost the writer's driver that much memory at each look."""
    with path.open(encoding="utf-8") as f:
        first = f.readline()
        if first.strip() != VERSION:
            raise CheckpointFormatError(f"{path}: checkpoint file version {first.strip() or '(empty)'!r}, "
                                        f"expected {VERSION!r} (Spark 3.5)")
        for line in f:
            yield line.rstrip("\n")


def log_files(folder: Path) -> list[Path]:
    """The files of one log, oldest batch first (``N`` and ``N.compact``; temporary files left out)."""
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.name.split(".")[0].isdigit() and not p.name.startswith(".")),
                  key=lambda p: int(p.name.split(".")[0]))


def source_log(checkpoint: Path) -> Path:
    """The log of the writer's file source: every landing file the stream has taken, with its batch."""
    return checkpoint / "sources" / "0"


def file_name(entry: dict[str, Any]) -> str:
    """The landing file name of a file-source log entry (its ``path`` is a URI)."""
    return unquote(str(entry["path"]).rsplit("/", 1)[-1])


def source_entries(checkpoint: Path, files: list[Path] | None = None) -> Iterator[dict[str, Any]]:
    """Every entry of the file source's log (``{"path", "timestamp", "batchId"}``), from every log file of
    ``checkpoint`` (compacted or not: a file compacted away may be listed twice), or from ``files``."""
    for path in log_files(source_log(checkpoint)) if files is None else files:
        for line in log_lines(path):
            if line.strip():
                yield json.loads(line)


def batch_ids(folder: Path) -> list[int]:
    """The batch ids of the files of one log (``offsets/``, ``commits/``: one file ``N`` per batch), ascending;
    ``[]`` when the folder is missing."""
    return sorted({int(p.name.split(".")[0]) for p in log_files(folder) if p.name.isdigit()})


def source_batches(checkpoint: Path) -> tuple[list[int], list[int]]:
    """The log batch ids of the file source's log files (plain ``N`` and compacted ``N.compact``), ascending, and
    of those the compacted ones. Spark writes ``sources/0/N`` (the files it takes next) before the query's
    ``offsets/<batch>`` that names it (``logOffset``), and compacts every ten log batches, later deleting the files
    before the newest compacted one."""
    files = log_files(source_log(checkpoint))
    ids = sorted({int(p.name.split(".")[0]) for p in files})
    compacted = sorted({int(p.name.split(".")[0]) for p in files if p.name.endswith(".compact")})
    return ids, compacted


def log_offset(checkpoint: Path, batch: int) -> int | None:
    """The file source's log batch (``logOffset``) that the query's ``offsets/<batch>`` names: the last log batch
    that query batch reads. None when the entry holds no offset of the file source (``-``).

    :raises CheckpointFormatError: the entry is not Spark 3.5's (a version other than ``v1``, no line for the
        source, or not the file source's offset)
    """
    path = checkpoint / "offsets" / str(batch)
    lines = check_format(path)  # the batch's metadata, then one line per source
    if len(lines) < 2:
        raise CheckpointFormatError(f"{path}: no offset of the file source")
    if lines[1].strip() == "-":
        return None
    try:
        return int(json.loads(lines[1])["logOffset"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointFormatError(f"{path}: {lines[1][:200]!r} is not a file source's offset") from exc


def covered(batch: int, ids: list[int], compacted: list[int]) -> bool:
    """True when the file source's log still holds log batch ``batch``: its own file, or a compacted file at or
    after it (a compacted file holds every entry up to its batch)."""
    return batch in ids or any(c >= batch for c in compacted)


def committed_source_batch(checkpoint: Path) -> int | None:
    """The file source's log batch (``logOffset``) of the last batch the query finished (``commits/``): a restart
    plans from the batch after it, so the entries of this log batch and of every earlier one are never read again
    to plan or recover a batch. None: no finished batch yet."""
    commits = [p for p in log_files(checkpoint / "commits") if p.name.isdigit()]
    if not commits:
        return None
    lines = check_format(checkpoint / "offsets" / commits[-1].name)  # the batch's metadata, then one per source
    if len(lines) < 2:
        raise CheckpointFormatError(f"{checkpoint / 'offsets' / commits[-1].name}: no offset of the file source")
    return int(json.loads(lines[1])["logOffset"])


def prune(path: Path, keep: Callable[[dict[str, Any]], bool]) -> int:
    """Rewrite the file-source log file ``path`` without the entries ``keep`` refuses; return how many it dropped.

    The rest is kept verbatim, in Spark's own layout (the version line, then ``\n`` and an entry per line). The
    new file is written beside it under a hidden name (which Spark's log ignores), synced, and renamed over it;
    Hadoop's checksum file of the old one (``.<name>.crc``) is removed first, as a file without one is read
    unchecked while a stale one would fail the read. Nothing is rewritten when nothing is dropped. Two processes
    pruning the same file at once (a frozen writer and the one that overtook it) each write a temporary file of
    their own: the last rename wins, a complete file either way."""
    for stale in path.parent.glob(f".*{PRUNE_SUFFIX}"):  # left by a process killed while pruning
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > 3600:
                stale.unlink()
    temp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}{PRUNE_SUFFIX}")  # one per process
    dropped = 0
    try:
        with temp.open("w", encoding="utf-8") as out:
            out.write(VERSION)
            for line in log_lines(path):
                if line.strip() and not keep(json.loads(line)):
                    dropped += 1
                    continue
                out.write("\n" + line)
            out.flush()
            os.fsync(out.fileno())
        if not dropped or not path.exists():  # nothing to drop, or Spark deleted the file meanwhile (compacted away)
            return 0
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
        os.replace(temp, path)
        return dropped
    finally:
        temp.unlink(missing_ok=True)
