"""Write-time dedupe (``dedupe_on_write: true``) with the real writer: files re-sent under new names, in the
same batch as the originals or after them, add no row; the dropped events are counted per hour in the commits,
so the hours reconcile and verify (audit = lake + rejects + duplicates dropped). Without the setting the same
re-send duplicates every id (see tests/test_repair.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.reconcile import reconcile
from laketide.close.verify import verify_partition
from laketide.ingest.landing import data_dir, name_hour, publish
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import DUPLICATES_DROPPED
from laketide.lake.hours import parse_partition
from tests.helpers import ingest, load, write_config, writer_log
from tests.test_writer import START, lineage_summaries, produce

pytestmark = pytest.mark.slow

H0 = parse_partition(START)
H = [H0 + timedelta(hours=i) for i in range(3)]


def resend(config_path: Path, hour: str, seq: int) -> None:
    """Publish every file of ``hour`` again under a new name (what a producer re-sending a day does)."""
    stream = load(config_path).stream("clicks")
    originals = sorted(p for p in data_dir(stream.landing_path).glob("*.jsonl")
                       if name_hour(p.name) == hour and "resender" not in p.name)
    for i, path in enumerate(originals):
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
        publish(stream.landing_path, lines, hour, "resender", seq + i, "clicks")


def test_resent_files_add_no_row_and_reconcile(spark: Any, tmp_path: Path) -> None:
    config_path = write_config(tmp_path, catalog_name="dedupe", dedupe_on_write=True, max_files_per_trigger=4)
    produce(config_path, "--start", START, "--hours", "3", "--events-per-hour", "300", "--events-per-file", "100",
            "--malformed-ratio", "0.04", "--seed", "51")
    # lands before the first run: ingested after the originals by the same writer, in later batches (several
    # batches: each one dedupes against the commits of the previous ones)
    resend(config_path, H[1].isoformat(), 100)
    ingest(spark, config_path)
    config = load(config_path)
    stream = config.stream("clicks")
    report = reconcile(config, stream)
    assert report.ok and report.duplicate_ids == {}, report
    first = {p.partition: p for p in report.partitions}
    assert first[H[1].isoformat()].duplicates == first[H[1].isoformat()].lake > 0
    assert first[H[0].isoformat()].duplicates == 0

    resend(config_path, H[0].isoformat(), 200)  # after them: dropped against the table
    ingest(spark, config_path)
    report = reconcile(config, stream)
    assert report.ok and report.duplicate_ids == {}, report
    again = {p.partition: p for p in report.partitions}
    assert again[H[0].isoformat()].lake == first[H[0].isoformat()].lake
    assert again[H[0].isoformat()].duplicates == first[H[0].isoformat()].lake
    assert again[H[0].isoformat()].audit == 2 * first[H[0].isoformat()].audit
    verified = verify_partition(config, stream, H[0])
    assert verified.success and verified.duplicates == first[H[0].isoformat()].lake, verified.message()

    dropped = [json.loads(s[DUPLICATES_DROPPED]) for s in
               lineage_summaries(load_catalog(config.catalog).load_table(stream.table)) if DUPLICATES_DROPPED in s]
    assert sum(d.get(H[0].isoformat(), 0) for d in dropped) == first[H[0].isoformat()].lake
    assert "duplicate(s) dropped" in writer_log(config_path)

    # a backfill of the re-sent hour re-reads every file, re-sent ones too, and drops the same duplicates
    from laketide.lake.spark import use_catalog
    from laketide.redo import backfill as bf
    from laketide.redo.overwrite import check_against_table, table_facts, validate_request

    use_catalog(spark, config)  # the test process's session, on this lake's catalog (a name of its own)
    request = validate_request(config, "backfill", "clicks", H[0], H[1], False, "tester")
    check_against_table(request, table_facts(config, stream))
    outcome = bf.backfill(spark, config, request, bf.prepare(config, request))
    change = outcome.hours[H[0].isoformat()]
    assert change.rows_before == change.rows_after == first[H[0].isoformat()].lake
    assert change.duplicates_removed == first[H[0].isoformat()].lake
    report = reconcile(config, stream)
    assert report.ok and report.duplicate_ids == {}, report
    assert {p.partition: p.duplicates for p in report.partitions}[H[0].isoformat()] == change.duplicates_removed
