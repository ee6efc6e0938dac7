"""A big hour is verified and reconciled in bounded memory, and one hour's reconciliation reads that hour alone.

The hour's rows are written with pyarrow and committed with pyiceberg (``tests.bighour``), not through the writer;
verification and the old in-memory read each run in a fresh process, and their peak resident memory is compared.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from laketide.close.hourscan import hours_row_filter, plan
from laketide.close.reconcile import reconcile
from laketide.lake.catalog import load_stream_table
from laketide.lake.hours import parse_partition
from tests.bighour import create_tables, measure, write_hour
from tests.helpers import load, write_config

HOUR = parse_partition("2026-11-19T08:00:00+00:00")
ROWS = 2_500_000
#: the verification's peak resident memory at 2.5M rows with ``scan_memory: 64MB``, the libraries (GX, pyiceberg,
#: DuckDB: ~400 MB) included: about 460 MB here at 3M; the old in-memory path took 1.43 GB at 2M rows
BOUND_MB = 650
#: how much more the 2.5M-row hour may take than a 100k-row one (one 250k-row data file's columns, DuckDB's buffers)
GROWTH_MB = 200
SMALL = parse_partition("2026-11-19T09:00:00+00:00")


def test_verification_of_a_big_hour_stays_under_its_memory_bound(tmp_path: Path) -> None:
    """2.5M rows verify under ``BOUND_MB`` (the old in-memory path took 1.43 GB at 2M rows, ~615 bytes a row; see
    ``bench/README.md`` for both paths side by side), and the peak hardly moves from a 100k-row hour to it."""
    config_path = write_config(tmp_path, catalog_name="big")
    raw = yaml.safe_load(config_path.read_text())
    raw.setdefault("close", {})["scan_memory"] = "64MB"  # DuckDB's share of the bound: its buffer pool fills up to it
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    config = load(config_path)
    stream = config.stream("clicks")
    create_tables(config, stream)
    write_hour(config, stream, HOUR, ROWS)
    write_hour(config, stream, SMALL, 100_000, first=ROWS)

    bounded = measure("tests.bighour", "verify_in_process", str(config_path), HOUR.isoformat())
    assert bounded["success"] and bounded["lake"] == bounded["audit"] == ROWS, bounded["message"]
    assert bounded["peak_mb"] < BOUND_MB, bounded
    small = measure("tests.bighour", "verify_in_process", str(config_path), SMALL.isoformat())
    assert small["success"] and small["lake"] == 100_000, small["message"]
    # 25 times the rows, not 25 times the memory: the imports and one data file's columns, whatever the hour
    assert bounded["peak_mb"] - small["peak_mb"] < GROWTH_MB, (bounded, small)


def test_one_hour_is_reconciled_from_its_own_partition(tmp_path: Path) -> None:
    config_path = write_config(tmp_path, catalog_name="hours")
    config = load(config_path)
    stream = config.stream("clicks")
    create_tables(config, stream)
    later = parse_partition("2026-11-19T11:00:00+00:00")
    write_hour(config, stream, HOUR, 3_000, file_rows=1_000)
    write_hour(config, stream, later, 2_000, first=3_000, file_rows=1_000)

    table = load_stream_table(config, stream.table, stream)
    _, tasks = plan(table, hours_row_filter(stream.event_time_field, [HOUR]), ("event_id",), None)
    assert len(tasks) == 3  # the files of that hour's partition, not the table's five
    one = reconcile(config, stream, [HOUR])
    assert [(p.partition, p.audit, p.lake, p.rejects) for p in one.partitions] == [(HOUR.isoformat(), 3_000, 3_000, 0)]
    assert one.ok and not one.duplicate_ids
    every = reconcile(config, stream)
    assert [(p.partition, p.lake) for p in every.partitions] == [(HOUR.isoformat(), 3_000), (later.isoformat(), 2_000)]
    assert every.ok

    # a duplicated id is found by both the hour's reconciliation and the whole table's
    write_hour(config, stream, HOUR, 1, first=2_999, file_rows=1)
    assert reconcile(config, stream, [HOUR]).duplicate_ids == {"e2999": 2}
    assert reconcile(config, stream).duplicate_ids == {"e2999": 2}
