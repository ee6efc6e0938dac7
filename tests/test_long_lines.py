"""The driver's scan for lines above max_line_bytes (``laketide.ingest.long_lines.scan``): no Spark, small files."""

from __future__ import annotations

from pathlib import Path

import pytest

from laketide.ingest import long_lines
from laketide.ingest.long_lines import LongLine, scan

LIMIT = 10


def found(tmp_path: Path, data: bytes, limit: int = LIMIT) -> list[tuple[int, int, bytes]]:
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    return [(line.offset, line.length, line.prefix) for line in scan(path, limit)]


def test_lines_around_the_limit(tmp_path: Path) -> None:
    data = b"a" * 10 + b"\n" + b"b" * 11 + b"\n" + b"\n" + b"c" * 9 + b"\n" + b"d" * 12
    # exactly the limit: not long; limit + 1: long; an empty line; a last line without newline
    assert found(tmp_path, data) == [(11, 11, b"b" * 11), (34, 12, b"d" * 12)]


def test_crlf_and_lone_cr_end_lines(tmp_path: Path) -> None:
    # \r\n is one terminator (not part of the line, no empty line after it); a lone \r ends a line too
    data = b"a" * 10 + b"\r\n" + b"b" * 11 + b"\r\n" + b"c" * 10 + b"\r" + b"d" * 11 + b"\r"
    assert found(tmp_path, data) == [(12, 11, b"b" * 11), (36, 11, b"d" * 11)]
    assert found(tmp_path, b"x" * 10 + b"\r\n" * 3) == []


def test_empty_and_small_files(tmp_path: Path) -> None:
    assert found(tmp_path, b"") == []
    assert found(tmp_path, b"\n\n\r\n") == []
    assert found(tmp_path, b"a" * 11) == [(0, 11, b"a" * 11)]


def test_a_first_line_is_measured_without_its_byte_order_mark(tmp_path: Path) -> None:
    # as the reader's rows are (it drops the mark there); reported with it: the line's bytes in the file
    assert found(tmp_path, long_lines.BOM + b"a" * 10 + b"\n") == []
    assert found(tmp_path, long_lines.BOM + b"a" * 11 + b"\n") == [(0, 14, long_lines.BOM + b"a" * 11)]
    assert found(tmp_path, b"x\n" + long_lines.BOM + b"a" * 9 + b"\n") == [(2, 12, long_lines.BOM + b"a" * 9)]


def test_lines_across_chunks_keep_only_their_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(long_lines, "CHUNK_BYTES", 7)
    monkeypatch.setattr(long_lines, "PREFIX_BYTES", 5)
    # a \r\n split between two chunks is still one terminator
    data = b"a" * 6 + b"\r" + b"\n" + b"b" * 30 + b"\n" + b"c" * 10 + b"\n"
    assert found(tmp_path, data) == [(8, 30, b"b" * 5)]


@pytest.mark.parametrize("limit", [3, 100])
def test_the_fast_path_skips_short_lines_inside_a_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         limit: int) -> None:
    # limit >= chunk: lines between two breaks of a chunk cannot be long; the chunk's last line is carried on
    monkeypatch.setattr(long_lines, "CHUNK_BYTES", 50)
    data = b"ab\ncd\r\n" * 20 + b"e" * 120 + b"\n" + b"ab\n" * 10 + b"f" * 101
    lines = found(tmp_path, data, limit)
    expected_long = [(140, 120, b"e" * 120), (291, 101, b"f" * 101)]
    assert lines == expected_long


def test_a_file_that_grew_is_read_as_far_as_the_reader_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a" * 11 + b"\n" + b"b" * 12 + b"\n" + b"c" * 13 + b"\n")
    # listed at 12 bytes: the line starting there is read too (through its break), the next one is not
    assert [(line.offset, line.length) for line in scan(path, LIMIT, listed=12)] == [(0, 11), (12, 12)]
    assert [(line.offset, line.length) for line in scan(path, LIMIT, listed=11)] == [(0, 11)]


def test_find_reads_only_files_above_the_limit(tmp_path: Path) -> None:
    from laketide.ingest.landing import data_dir
    from laketide.lake.commits import FileStat
    from tests.helpers import load, write_config

    stream = load(write_config(tmp_path, max_line_bytes=10)).stream("clicks")
    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "big.jsonl").write_bytes(b"a" * 20 + b"\n")
    # the stated size of 'small' is what counts: it is never opened (it does not even exist)
    stats = {"big.jsonl": FileStat(21, 0), "small.jsonl": FileStat(10, 0)}
    assert long_lines.find(stream, stats) == [LongLine("big.jsonl", 0, 20, b"a" * 20)]
    assert long_lines.find(stream, {"small.jsonl": FileStat(10, 0)}) == []
