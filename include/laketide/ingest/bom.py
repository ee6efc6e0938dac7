"""A byte order mark at the start of a landing file: put back where Spark's text source dropped it.

The landing-zone contract rejects a line that starts with a byte order mark (U+FEFF, the bytes ``EF BB BF``:
JSON Lines is UTF-8 without one), with its reason. Spark's ``text`` source reads lines with Hadoop's line reader,
which drops the mark from the first line of a file (only there: a mark at the start of any other line is kept),
so that line would be parsed, and ingested, as if the mark were not there, and a first line holding only the mark
would become a blank line, in no table and in no count while the producer's audit counts it.

So the driver reads the first three bytes of each file of a batch (:func:`marked_files`: the files' names are
in the batch's plan, no pass over its rows); for a file that starts with the mark, :func:`restore_marks` finds its
first line among the batch's lines and puts the mark back in front of it, where the parse's checks reject it
(``starts with a byte order mark``), its raw text keeping the mark. A batch without such a file is left as it is
and costs three bytes read per file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

BOM = b"\xef\xbb\xbf"
#: the column a line's position in its Spark partition is kept in while the first lines are found
_POSITION = "_bom_position"


def marked_files(folder: Path, names: Iterable[str], limit: int | None = None) -> list[str]:
    """The files among ``names`` (in ``folder``) whose first bytes are a byte order mark, sorted. A file gone
    since it was listed is left out (the batch fails on it anyway), and so is, with ``limit``, a file whose first
    line is longer than ``limit`` bytes: that line is rejected as too long, without the writer reading it (see
    ``laketide.ingest.long_lines``), and may not be among the batch's lines."""
    marked = []
    for name in names:
        try:
            with (folder / name).open("rb") as f:
                if f.read(len(BOM)) != BOM:
                    continue
                if limit is not None and _longer_than(f, limit):
                    continue
        except (FileNotFoundError, NotADirectoryError):
            continue
        marked.append(name)
    return sorted(marked)


def _longer_than(f: BinaryIO, limit: int, chunk: int = 1024 * 1024) -> bool:
    """The line read from ``f`` on (up to ``\n`` or ``\r``, or the end) is longer than ``limit`` bytes."""
    length = 0
    while length <= limit:
        data = f.read(min(chunk, limit + 1 - length))
        if not data:
            return False
        ends = [i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0]
        if ends:
            return length + min(ends) > limit
        length += len(data)
    return True


def restore_marks(lines: DataFrame, marked: Iterable[str]) -> DataFrame:
    """``lines`` (columns ``value`` and ``_source_file``, as the writer reads them) with the byte order mark put
    back in front of the first line of each file of ``marked``.

    A file's first line is the first row of the split that starts the file: Spark reads the rows of a split in
    order within one partition, and places a file's splits in partitions in the order of their offsets (largest
    first: every split but the last is as large as any). So it is the file's row with the lowest
    ``monotonically_increasing_id`` (the partition's index, then the row's position in it); one small job finds
    that position for each marked file, the same on every evaluation of ``lines`` (a micro-batch reads the same
    files in the same partitions each time)."""
    from pyspark.sql import functions as F

    files = sorted(set(marked))
    if not files:
        return lines
    columns = lines.columns
    positioned = lines.withColumn(_POSITION, F.monotonically_increasing_id())
    firsts = (positioned.where(F.col("_source_file").isin(files)).groupBy("_source_file")
              .agg(F.min(_POSITION).alias("first")).collect())
    first = None
    for row in firsts:
        test = (F.col("_source_file") == F.lit(row["_source_file"])) & (F.col(_POSITION) == F.lit(row["first"]))
        first = test if first is None else first | test
    if first is None:  # no line of those files in the batch
        return lines
    value = F.when(first, F.concat(F.lit("\ufeff"), F.col("value"))).otherwise(F.col("value")).alias("value")
    return positioned.select(*[value if c == "value" else F.col(c) for c in columns])
