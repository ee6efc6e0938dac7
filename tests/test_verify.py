"""Great Expectations verification of partitions landed by the real producer and ingested by the real writer
(real Iceberg tables on a real SQLite catalog); then the lake is tampered with and verification must fail."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import parquet_file_to_data_file

from laketide.close.reconcile import reconcile
from laketide.close.verify import Verification, partition_filter, verify_partition
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import LaketideError
from laketide.ingest.landing import expected_counts
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import parse_partition
from tests.helpers import ingest, load, unique_catalog, write_config
from tests.test_writer import landed, produce

pytestmark = pytest.mark.slow

QUIET = datetime(2026, 11, 21, 22, tzinfo=UTC)  # hour offset 2 of test_writer.landed(): no events at all
LATER = datetime(2026, 11, 22, 2, tzinfo=UTC)  # never landed by landed()


@dataclass(frozen=True)
class Lake:
    config_path: Path
    config: LaketideConfig
    #: partition -> (audit, lake, rejects) per reconcile, right after the writer ran
    counts: dict[datetime, tuple[int, int, int]]
    #: the events table's snapshot after the writer ran
    base_snapshot: int

    @property
    def stream(self) -> StreamConfig:
        return self.config.stream("clicks")

    def events(self) -> Any:
        return load_catalog(self.config.catalog).load_table(self.stream.table)

    def with_rejects(self) -> datetime:
        """A partition with rejected lines (so that every count in a message is non-zero)."""
        return next(p for p, (_, _, rejects) in sorted(self.counts.items()) if rejects > 0)


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    config_path = landed(tmp_path_factory.mktemp("verify"), catalog_name=unique_catalog("verify"))
    ingest(spark, config_path)
    config = load(config_path)
    stream = config.stream("clicks")
    report = reconcile(config, stream)
    assert report.ok and not report.pending_files
    counts = {parse_partition(p.partition): (p.audit, p.lake, p.rejects) for p in report.partitions}
    assert set(counts) == {parse_partition(k) for k in expected_counts(stream.landing_path)}
    assert QUIET not in counts and len(counts) == 3
    snapshot = load_catalog(config.catalog).load_table(stream.table).current_snapshot()
    assert snapshot is not None
    return Lake(config_path, config, counts, snapshot.snapshot_id)


@pytest.fixture
def tamper(lake: Lake) -> Iterator[Any]:
    """The events table, to be changed by the test; rolled back to the writer's snapshot afterwards."""
    yield lake.events()
    lake.events().manage_snapshots().set_current_snapshot(lake.base_snapshot).commit()
    assert lake.events().current_snapshot().snapshot_id == lake.base_snapshot


def saved(result: Verification) -> dict[str, Any]:
    assert result.results_path.is_file()
    payload: dict[str, Any] = json.loads(result.results_path.read_text())
    return payload


def rewrite_one_file(table: Any, stream: StreamConfig, partition: datetime,
                     change: Callable[[pa.Table], pa.Table]) -> list[str]:
    """Replace one data file of ``partition`` by ``change(its rows)`` in one overwrite commit; return its event ids.

    Copy-on-write by hand: pyiceberg's own ``delete(delete_filter=...)`` and ``append`` on the hours-partitioned
    events table need the optional ``pyiceberg-core`` package (its arrow ``hours`` transform), which the
    project does not install. The new file keeps the Spark-written field ids; its partition comes from stats.
    """
    task = next(iter(table.scan(row_filter=partition_filter(stream, partition)).plan_files()))
    old = task.file
    with table.io.new_input(old.file_path).open() as stream:
        rows = pq.read_table(stream)
    assert rows.schema.field("event_id").metadata, "the writer's file carries Iceberg field ids"
    new_path = old.file_path.replace(".parquet", f"-tampered-{uuid.uuid4().hex[:8]}.parquet")
    with table.io.new_output(new_path).create() as out:
        pq.write_table(change(rows), out)
    new = parquet_file_to_data_file(table.io, table.metadata, new_path)
    assert new.partition == old.partition
    with table.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
        overwrite.delete_data_file(old)
        overwrite.append_data_file(new)
    return [str(v) for v in rows["event_id"].to_pylist()]


# ------------------------------------------------------------------ a clean lake verifies


def test_every_partition_verifies(lake: Lake) -> None:
    for partition, (audit, rows, rejects) in sorted(lake.counts.items()):
        result = verify_partition(lake.config, lake.stream, partition)
        assert result.success, result.message()
        assert (result.audit, result.lake, result.rejects) == (audit, rows, rejects)
        assert result.audit == result.lake + result.rejects
        assert result.pending_files == 0 and result.failures == []
        assert result.snapshot_id == lake.base_snapshot
        assert json.loads(result.summary_json())["snapshot_id"] == str(lake.base_snapshot)  # as JSON hands ids out
        assert result.message() == (
            f"partition {partition.isoformat()} of clicks verified: audit {audit} == lake {rows} + rejects "
            f"{rejects} at snapshot {lake.base_snapshot}"
        )
        assert json.loads(result.summary_json())["success"] is True
        payload = saved(result)
        assert payload["success"] is True
        kinds = [r["expectation_config"]["meta"]["check"] for r in payload["results"]]
        assert kinds.count("expect_column_values_to_not_be_null") == 4  # the required fields
        assert {"expect_table_row_count_to_equal", "expect_column_values_to_be_unique",
                "expect_column_values_to_be_between"} <= set(kinds)
        assert payload["meta"]["laketide"]["partition"] == partition.isoformat()
        assert payload["meta"]["laketide"]["snapshot_id"] == str(lake.base_snapshot)
        folder = lake.config.close.results_dir / "clicks"
        assert result.results_path.parent == folder
        assert result.results_path.name.startswith(partition.strftime("%Y%m%dT%H") + "-")
    assert sum(rejects for _, _, rejects in lake.counts.values()) > 0  # the rejects were attributed


def test_the_quiet_hour_verifies_as_zero(lake: Lake) -> None:
    result = verify_partition(lake.config, lake.stream, QUIET)
    assert result.success, result.message()
    assert (result.audit, result.lake, result.rejects, result.pending_files) == (0, 0, 0, 0)
    assert "audit 0 == lake 0 + rejects 0" in result.message()
    row_count = next(r for r in saved(result)["results"]
                     if r["expectation_config"]["meta"]["check"] == "expect_table_row_count_to_equal")
    assert row_count["result"]["observed_value"] == 0 and row_count["expectation_config"]["kwargs"]["max_value"] == 0


def test_partition_must_be_an_aware_hour_start(lake: Lake) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        verify_partition(lake.config, lake.stream, datetime(2026, 11, 21, 20))
    with pytest.raises(ValueError, match="not the start of an hour"):
        verify_partition(lake.config, lake.stream, QUIET + timedelta(minutes=1))


def test_missing_events_table_is_a_clear_error(tmp_path: Path) -> None:
    config = load(write_config(tmp_path))
    with pytest.raises(LaketideError) as info:
        verify_partition(config, config.stream("clicks"), QUIET)
    message = str(info.value)
    assert "table lake.clicks" in message and "does not exist" in message
    assert "laketide_ingest_clicks" in message


# ------------------------------------------------------------------ a tampered lake does not


def test_a_deleted_row_fails_with_the_numbers(lake: Lake, tamper: Any) -> None:
    partition = lake.with_rejects()
    audit, rows, rejects = lake.counts[partition]
    victim: list[str] = []

    def delete_one(rows: pa.Table) -> pa.Table:
        victim.append(rows["event_id"][0].as_py())
        return rows.filter(pc.not_equal(rows["event_id"], victim[0]))

    rewrite_one_file(tamper, lake.stream, partition, delete_one)

    result = verify_partition(lake.config, lake.stream, partition)
    assert not result.success
    assert (result.audit, result.lake, result.rejects) == (audit, rows - 1, rejects)
    assert result.snapshot_id == lake.events().current_snapshot().snapshot_id != lake.base_snapshot
    message = result.message()
    assert message.startswith(
        f"partition {partition.isoformat()} of clicks FAILED verification: "
        f"audit {audit} != lake {rows - 1} + rejects {rejects} (missing 1)"
    ), message
    assert result.failures == [
        f"expect_table_row_count_to_equal: observed {rows - 1} rows, expected {rows} "
        f"(audit {audit} - rejects {rejects})"
    ]
    assert str(result.results_path) in message
    payload = saved(result)
    assert payload["success"] is False
    row_count = next(r for r in payload["results"]
                     if r["expectation_config"]["meta"]["check"] == "expect_table_row_count_to_equal")
    assert row_count["success"] is False and row_count["result"]["observed_value"] == rows - 1
    summary = json.loads(result.summary_json())
    assert summary["success"] is False and summary["missing"] == 1

    # the snapshot the writer left still verifies: verification reads the snapshot it is given
    before = verify_partition(lake.config, lake.stream, partition, snapshot_id=lake.base_snapshot)
    assert before.success and before.lake == rows and before.snapshot_id == lake.base_snapshot


def test_a_duplicate_event_id_fails_uniqueness(lake: Lake, tamper: Any) -> None:
    partition = max(lake.counts)
    audit, rows, rejects = lake.counts[partition]
    ids = rewrite_one_file(tamper, lake.stream, partition, lambda rows: pa.concat_tables([rows, rows.slice(0, 1)]))
    duplicate = ids[0]

    result = verify_partition(lake.config, lake.stream, partition)
    assert not result.success
    assert (result.audit, result.lake, result.rejects) == (audit, rows + 1, rejects)
    assert f"audit {audit} != lake {rows + 1} + rejects {rejects} (1 more than reported)" in result.message()
    unique = [f for f in result.failures if f.startswith("expect_column_values_to_be_unique(event_id)")]
    assert unique == [f"expect_column_values_to_be_unique(event_id): 2 of {rows + 1} rows hold a duplicated value "
                      f"(e.g. {duplicate}), expected 0"]
    assert any(f.startswith("expect_table_row_count_to_equal") for f in result.failures)
    outcome = next(r for r in saved(result)["results"]
                   if r["expectation_config"]["meta"]["check"] == "expect_column_values_to_be_unique")
    assert outcome["success"] is False and outcome["result"]["observed_value"] == 2


def test_a_missing_snapshot_is_a_clear_error(lake: Lake) -> None:
    with pytest.raises(LaketideError, match=r"snapshot 12345 is not in lake\.clicks"):
        verify_partition(lake.config, lake.stream, QUIET, snapshot_id=12345)


def test_files_the_writer_has_not_ingested_are_pending(lake: Lake) -> None:
    """Landed after the writer ran (the last test: it adds landing files, no table changes)."""
    produce(lake.config_path, "--start", LATER.isoformat(), "--hours", "1", "--events-per-hour", "300",
            "--events-per-file", "100", "--seed", "3")
    result = verify_partition(lake.config, lake.stream, LATER)
    assert not result.success
    assert (result.audit, result.lake, result.rejects, result.pending_files) == (300, 0, 0, 3)
    message = result.message()
    assert "audit 300 != lake 0 + rejects 0 (missing 300)" in message
    assert "3 landed file(s) of the partition not ingested yet" in message
    assert json.loads(result.summary_json())["pending_files"] == 3
    assert len(saved(result)["meta"]["laketide"]["pending_files"]) == 3
    assert f"not ingested yet: {', '.join(saved(result)['meta']['laketide']['pending_files'])} (the writer is " \
        "behind)" in message  # named
    # the other partitions are untouched by the new files
    first = min(lake.counts)
    assert verify_partition(lake.config, lake.stream, first).success
