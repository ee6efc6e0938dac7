"""A byte order mark at the start of a landing file: the contract rejects a line that starts with one, and Spark's
text source (Hadoop's line reader) drops the mark from a file's first line before anyone sees it. Through the real
writer, on both commit paths: the first line of such a file is a reject with the mark's reason, its raw text keeps
the mark, a mark-only first line is a reject too (not a blank line lost to the counts), a mark inside a file is
rejected as before, and every hour is exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from laketide.close.reconcile import reconcile
from laketide.ingest import landing
from laketide.ingest.bom import marked_files
from laketide.lake.catalog import load_catalog
from tests.helpers import ingest, load, unique_catalog, write_config

PARTITION = "2026-11-22T03:00:00+00:00"
BOM = b"\xef\xbb\xbf"
REASON = "starts with a byte order mark (U+FEFF): write UTF-8 without a BOM"


def event(event_id: str, minute: int) -> bytes:
    return json.dumps({"event_id": event_id, "event_time": f"2026-11-22T03:{minute:02d}:00+00:00", "user_id": 7,
                       "page": "/home"}).encode()


@pytest.mark.slow
@pytest.mark.parametrize("commit_path", ["internal", "public"])
def test_a_line_starting_with_a_bom_is_rejected_also_the_first_line_of_a_file(spark: Any, tmp_path: Path,
                                                                               commit_path: str) -> None:
    config_path = write_config(tmp_path, catalog_name=unique_catalog(f"bom_{commit_path}"), commit_path=commit_path)
    config = load(config_path)
    stream = config.stream("clicks")
    L = stream.landing_path
    files = {
        # the mark at the start of the file, then a good line, then the mark again inside the file
        "first": landing.publish(L, [BOM + event("bom-first", 1), event("ok-1", 2), BOM + event("bom-inside", 3)],
                                 PARTITION, "bom", 0, "clicks"),
        # a file whose first line is the mark alone: a record (not blank), rejected
        "alone": landing.publish(L, [BOM, event("ok-2", 4)], PARTITION, "bom", 1, "clicks"),
        # no mark: untouched, also the same text as a marked line (only the file's first line is marked)
        "plain": landing.publish(L, [event("ok-3", 5), event("bom-first", 1)], PARTITION, "bom", 2, "clicks"),
    }
    ingest(spark, config_path)

    catalog = load_catalog(config.catalog)
    ids = sorted(catalog.load_table(stream.table).scan(selected_fields=("event_id",)).to_arrow()["event_id"]
                 .to_pylist())
    assert ids == ["bom-first", "ok-1", "ok-2", "ok-3"]  # the one "bom-first" row is the plain file's
    rejects = catalog.load_table(stream.rejects_table).scan().to_arrow().to_pylist()
    got = sorted((r["source_file"], r["raw"], r["reason"]) for r in rejects)
    assert got == sorted([
        (files["first"].name, (BOM + event("bom-first", 1)).decode(), REASON),
        (files["first"].name, (BOM + event("bom-inside", 3)).decode(), REASON),
        (files["alone"].name, BOM.decode(), REASON),
    ]), got
    (counts,) = [p for p in reconcile(config, stream).partitions if p.partition == PARTITION]
    assert (counts.audit, counts.lake, counts.rejects) == (7, 4, 3), counts


def test_the_files_that_start_with_a_mark(tmp_path: Path) -> None:
    """Three bytes read per file; a file whose first line is over the limit is left to the long-line rejects."""
    files = {"short": BOM + b"x" * 10 + b"\n", "long": BOM + b"x" * 11 + b"\n", "last": BOM + b"x" * 10,
             "crlf": BOM + b"x" * 5 + b"\r\n" + b"y" * 100, "alone": BOM, "blank": BOM + b"\nzz", "none": b"xyz",
             "half": BOM[:2]}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert marked_files(tmp_path, [*files, "gone"], limit=10) == ["alone", "blank", "crlf", "last", "short"]
    assert marked_files(tmp_path, files) == ["alone", "blank", "crlf", "last", "long", "short"]
