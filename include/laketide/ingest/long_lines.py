"""Lines longer than ``max_line_bytes``: cut off before Spark holds them, found and rejected by the driver.

Spark's ``text`` source builds each line whole before the parse can measure it: one line of hundreds of MB runs
the writer's JVM (shared by every stream of its group) out of memory, at every restart. Hadoop's line reader
takes a maximum (:data:`MAX_LENGTH_OPTION`, given per stream as a reader option, :func:`reader_options`): a longer
line is skipped without being held. It is skipped SILENTLY, and a long line that crosses a split of its file
leaves a fragment (a row of about the maximum's length) in each split it ends. So, for a batch that holds a file
larger than ``max_line_bytes`` (no other file can hold such a line), the driver scans that file in chunks
(:func:`scan`, bounded memory) for the lines above the limit; when it finds any, the batch's rows above the
limit (fragments, and lines a little above the limit that the reader kept) are dropped (:func:`without_long`) and
each line found becomes one reject (:func:`rejects`), as an over-long line's reject always was: its start, a
marker with its length, the reason naming both lengths, its landing file. A batch without such a file costs
nothing more: its files' sizes are already known, from the batch's plan (the public commit path, on a Spark whose
plans it cannot read, knows them from the batch's rows only: there a file that gives the batch no row at all,
every line of it above the limit and none crossing a split, is not seen; it is in no commit, and reconcile
lists it as landed, not ingested).

The scan splits lines as Hadoop's reader does (``\\n``, ``\\r\\n`` and a lone ``\\r`` end a line; a last line needs no
terminator) and measures them as the batch's rows are (the reader drops a byte order mark at the start of a file:
a first line is measured without it, and reported with it, as its bytes in the file).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from laketide.config import StreamConfig
from laketide.ingest.columns import PACK_SEPARATOR, RAW_PREFIX_CHARS, fits, too_long_reason, truncated
from laketide.ingest.landing import data_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from laketide.lake.commits import FileStat

#: Hadoop's line reader skips every line longer than this (a Hadoop setting: Spark's file sources hand their
#: reader options to it)
MAX_LENGTH_OPTION = "mapreduce.input.linerecordreader.line.maxlength"
#: bytes above ``max_line_bytes`` the reader still takes: a line's terminator (``\r\n``) and a byte order mark
#: count against the reader's maximum, not against ``max_line_bytes``
READER_SLACK = 8
#: bytes of a long line kept for its reject: enough for the rejects table's RAW_PREFIX_CHARS characters
PREFIX_BYTES = 4 * RAW_PREFIX_CHARS
CHUNK_BYTES = 1024 * 1024
BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class LongLine:
    """A line longer than ``max_line_bytes`` in a landing file: where it starts (byte offset), its length in bytes
    without its terminator, and its first bytes."""

    file: str
    offset: int
    length: int
    prefix: bytes


def reader_options(stream: StreamConfig) -> dict[str, str]:
    """The reader option that keeps Spark from holding a line much longer than ``max_line_bytes``."""
    return {MAX_LENGTH_OPTION: str(min(stream.max_line_bytes + READER_SLACK, 2**31 - 1))}


def scan(path: Path, limit: int, name: str | None = None, listed: int | None = None) -> list[LongLine]:
    """The lines of the file at ``path`` longer than ``limit`` bytes, read in chunks of :data:`CHUNK_BYTES`: the
    memory it takes does not grow with the lines. ``name``: the file's name in the results (default its own);
    ``listed``: the file's size when Spark listed it (of a file that grew since, the reader reads the lines that
    start at or before it, through their line break: so does the scan)."""
    found: list[LongLine] = []
    name = name or path.name
    start = length = 0  # the current line's offset and length so far
    prefix = bytearray()
    first = True
    after_cr = False  # the last byte read was a \r ending a line: a \n right after it belongs to it

    def end() -> None:
        nonlocal first, prefix
        # the reader drops a byte order mark in front of a file's first line: the line is measured without it (as
        # the batch's rows are, see without_long), and reported with it (the line's bytes in the file)
        size = length - len(BOM) if first and prefix.startswith(BOM) else length
        first = False
        if size > limit and (listed is None or start <= listed):
            found.append(LongLine(name, start, length, bytes(prefix)))
        prefix = bytearray()

    with path.open("rb") as f:
        offset = 0  # of the chunk in the file
        while chunk := f.read(CHUNK_BYTES):
            pos = 0
            lf = cr = -2  # the next \n and \r at or after pos (-1: none in this chunk; below pos: to look up)
            while pos < len(chunk):
                if after_cr:
                    after_cr = False
                    if chunk[pos] == 0x0A:  # \r\n
                        pos += 1
                        start = offset + pos
                        continue
                if -1 != lf < pos:
                    lf = chunk.find(b"\n", pos)
                if -1 != cr < pos:
                    cr = chunk.find(b"\r", pos)
                stop = min(lf if lf >= 0 else len(chunk), cr if cr >= 0 else len(chunk))
                if len(prefix) < PREFIX_BYTES:
                    prefix += chunk[pos:min(stop, pos + PREFIX_BYTES - len(prefix))]
                length += stop - pos
                if stop == len(chunk):
                    break
                end()
                if limit >= len(chunk):  # no line between two breaks of this chunk is long: go to its last one
                    stop = max(stop, chunk.rfind(b"\n"), chunk.rfind(b"\r"))
                after_cr = chunk[stop] == 0x0D
                pos = stop + 1
                start, length = offset + pos, 0
                if listed is not None and start > listed:
                    return found
            offset += len(chunk)
    if length:
        end()
    return found


def find(stream: StreamConfig, stats: Mapping[str, FileStat]) -> list[LongLine]:
    """The lines above ``max_line_bytes`` of a batch's landing files (``stats``: name -> size and modification
    time): only files larger than ``max_line_bytes`` are read. Nothing is read for a batch without one."""
    limit = stream.max_line_bytes
    big = sorted(name for name, stat in stats.items() if stat.size > limit)
    if not big:
        return []
    folder = data_dir(stream.landing_path)
    return [line for name in big for line in scan(folder / name, limit, listed=stats[name].size)]


def without_long(lines: DataFrame, stream: StreamConfig) -> DataFrame:
    """The batch's lines (``runner.extract``'s) without those above ``max_line_bytes``: with long lines found by
    :func:`scan`, what the reader made of them (fragments, lines a little above the limit) is left out."""
    return lines.where(fits(lines["value"], stream))


def without_long_staged(rows: DataFrame, stream: StreamConfig) -> DataFrame:
    """:func:`without_long` for rows of ``Validator.staged_rows`` (the public commit path finds the long lines after
    its pass over the batch): the rejected rows of lines above ``max_line_bytes`` are left out (a rejected row
    carries the line's length, see ``columns.pack_reject``)."""
    from pyspark.sql import functions as F

    source = F.col("_source_file")
    length = F.split(source, PACK_SEPARATOR, 4)[1].cast("bigint")
    over = F.col(f"`{stream.event_time_field}`").isNull() & source.isNotNull() & (length > stream.max_line_bytes)
    return rows.where(~F.coalesce(over, F.lit(False)))


def rejects(spark: SparkSession, stream: StreamConfig, found: Iterable[LongLine]) -> DataFrame:
    """A reject row per line of ``found`` in the shape of ``Validator.rejects_of`` (``_raw`` already cut as the
    rejects table keeps an over-long line, ``_source_file``, ``_error``, ``_truncated``): the input of
    ``rejects.rejected_rows``."""
    from pyspark.sql import functions as F

    from laketide.lake.spark import local_frame

    rows = [(line.prefix, line.length, line.file) for line in found]
    frame = local_frame(spark, rows, "_prefix binary, _length bigint, _source_file string")
    raw, length = F.col("_prefix").cast("string"), F.col("_length")
    return frame.select(
        truncated(raw, length).alias("_raw"), F.col("_source_file"),
        too_long_reason(raw, stream, length).alias("_error"), F.lit(True).alias("_truncated"),
    )


def count_by_file(found: Iterable[LongLine]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in found:
        counts[line.file] = counts.get(line.file, 0) + 1
    return counts
