"""What the writer records of a landing file it read: size, modification time and a hash of its content (see
``laketide.lake.commits``, ``laketide.source-stats``), and how to read them from the file again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class FileStat:
    """Size and modification time (ms since the epoch) of a landing file, as the writer recorded them, and the
    hash of its content when recorded (:func:`content_hash`; not part of equality: ``os.stat`` has none)."""

    size: int
    mtime_ms: int
    content: int | None = field(default=None, compare=False)


def file_stat(path: Path) -> FileStat:
    st = path.stat()
    return FileStat(st.st_size, st.st_mtime_ns // 1_000_000)


def content_hash(path: Path, size: int) -> int | None:
    """The 64-bit XXH3 hash of the first ``size`` bytes of ``path`` (what the writer read of it), None when it
    cannot be read. A file rewritten with the same size and its old modification time put back (``rsync -t``,
    ``cp -p`` of an edited copy) keeps its ``FileStat`` but not this. Read in 1 MiB pieces: a file of any size costs
    this process 1 MiB (a mapping of the file would count every page read in its memory)."""
    import xxhash

    digest = xxhash.xxh3_64()
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    try:
        with path.open("rb", buffering=0) as f:
            left = size
            while left > 0:
                n = f.readinto(view[:min(left, len(buffer))])
                if not n:
                    break
                digest.update(view[:n])
                left -= n
    except OSError:
        return None
    finally:
        view.release()
    return int(digest.intdigest())


def with_content(stats: Mapping[str, FileStat], folder: Path) -> dict[str, FileStat]:
    """``stats`` (landing file name -> stat) with the content hash of each file of ``folder`` added."""
    return {name: replace(stat, content=content_hash(folder / name, stat.size)) for name, stat in stats.items()}
