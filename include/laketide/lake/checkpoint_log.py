"""Spark's Structured Streaming checkpoint logs as files: the one place that reads their format.

Each log (``offsets/``, ``commits/``, the file source's ``sources/0/``) is a folder of files named by batch id
(``N``, and for the file source ``N.compact`` every ten batches); each file is a version line, ``v1`` in Spark
3.x, then one JSON value per line. Non-public formats: :func:`check_format` refuses another version, so that a
Spark upgrade fails loudly instead of being misread.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from laketide.errors import CheckpointFormatError

VERSION = "v1"


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
