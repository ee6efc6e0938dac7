"""``lineage`` against pyiceberg's full parse, on metadata written by Spark (Iceberg Java) and by pyiceberg."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import load_file_io
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import LongType, NestedField

from laketide.errors import LaketideError, TableNotFoundError
from laketide.lake import snapshots
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import should_write, table_marker
from laketide.lake.snapshots import Snap, lineage, metadata_location
from laketide.lake.spark import local_frame
from tests.helpers import load

EVENTS = "snaptest.events"
WRITER = "laketide.writer-id"
BATCH = "laketide.batch-id"
JAVA_KEYS = [
    "format-version", "table-uuid", "location", "last-sequence-number", "last-updated-ms", "last-column-id",
    "current-schema-id", "schemas", "default-spec-id", "partition-specs", "last-partition-id",
    "default-sort-order-id", "sort-orders", "properties", "current-snapshot-id", "refs", "snapshots", "statistics",
    "partition-statistics", "snapshot-log", "metadata-log",
]
Stop = Callable[[Snap], bool] | None


def expected(metadata: TableMetadata, stop: Stop = None) -> tuple[int | None, list[Snap]]:
    """The answer from pyiceberg's full parse: the walk from the current snapshot up its parents. (pyiceberg's own
    ``ancestors_of`` looks each parent up in the list of snapshots: for 10,000 snapshots, 24 s of the test's CPU.)"""
    out: list[Snap] = []
    for s in parent_walk(metadata):
        summary = {"operation": s.summary.operation.value, **s.summary.additional_properties} if s.summary else {}
        out.append(Snap(s.snapshot_id, s.parent_snapshot_id, s.sequence_number or 0, s.timestamp_ms, summary))
        if stop is not None and stop(out[-1]):
            break
    return metadata.current_snapshot_id, out


def parent_walk(metadata: TableMetadata) -> Iterator[Snapshot]:
    """The current snapshot of ``metadata``, its parent, and so on (what ``ancestors_of`` yields), by id."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    node = by_id.get(metadata.current_snapshot_id) if metadata.current_snapshot_id is not None else None
    while node is not None:
        yield node
        node = by_id.get(node.parent_snapshot_id) if node.parent_snapshot_id is not None else None


def read_metadata(catalog: SqlCatalog, identifier: str) -> bytes:
    location = metadata_location(catalog, identifier)
    with load_file_io(catalog.properties, location).new_input(location).open() as stream:
        return stream.read()


class Spy:
    """Counts the bytes ``lineage`` reads (through pyiceberg's FileIO) and its full parses."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.full_parses = 0

    @property
    def bytes_read(self) -> int:
        return sum(self.reads)

    def reset(self) -> None:
        self.reads.clear()
        self.full_parses = 0


class _Stream:
    def __init__(self, inner: Any, spy: Spy) -> None:
        self.inner, self.spy = inner, spy

    def read(self, size: int | None = None) -> bytes:
        data: bytes = self.inner.read() if size is None else self.inner.read(size)
        self.spy.reads.append(len(data))
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.inner.seek(offset, whence))

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()


class _Input:
    def __init__(self, inner: Any, spy: Spy) -> None:
        self.inner, self.spy = inner, spy

    def __len__(self) -> int:
        return len(self.inner)

    def open(self, seekable: bool = True) -> _Stream:
        return _Stream(self.inner.open(seekable=seekable), self.spy)


class _IO:
    def __init__(self, inner: Any, spy: Spy) -> None:
        self.inner, self.spy = inner, spy

    def new_input(self, location: str) -> _Input:
        return _Input(self.inner.new_input(location), self.spy)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    import pyiceberg.io

    spy = Spy()
    real_io, real_parse = pyiceberg.io.load_file_io, snapshots._parse_all

    def parse_all(stream: Any) -> Any:
        spy.full_parses += 1
        return real_parse(stream)

    monkeypatch.setattr(pyiceberg.io, "load_file_io", lambda props, location=None: _IO(real_io(props, location), spy))
    monkeypatch.setattr(snapshots, "_parse_all", parse_all)
    return spy


# --- metadata written by Spark (Iceberg Java) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def spark_tables(spark: Any) -> dict[str, Any]:
    """snaptest.events: 8 appends, a rollback to the 6th, one more append; snaptest.empty; snaptest.zipped (gzip
    metadata); snaptest.expired: 5 appends, then all but the last 2 snapshots expired."""
    # the session's catalog database lives in the fixture's laketide home, next to its laketide.yaml
    db = spark.conf.get("spark.sql.catalog.laketide.uri").removeprefix("jdbc:sqlite:").split("?")[0]
    catalog = load_catalog(load(Path(db).parent / "laketide.yaml").catalog)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS laketide.snaptest")
    spark.sql("CREATE TABLE laketide.snaptest.events (id bigint, s string) USING iceberg")
    spark.sql("CREATE TABLE laketide.snaptest.empty (id bigint) USING iceberg")
    spark.sql("CREATE TABLE laketide.snaptest.zipped (id bigint, s string) USING iceberg "
              "TBLPROPERTIES ('write.metadata.compression-codec'='gzip')")
    spark.sql("CREATE TABLE laketide.snaptest.expired (id bigint, s string) USING iceberg")

    def append(table: str, batch: int, writer: str) -> None:
        (local_frame(spark, [(batch, "x")], "id bigint, s string").writeTo(f"laketide.{table}")
         .option(f"snapshot-property.{WRITER}", writer).option(f"snapshot-property.{BATCH}", str(batch)).append())

    for batch in range(8):
        append(EVENTS, batch, "w2" if batch in (2, 6) else "w1")
    ids = [s.snapshot_id for s in catalog.load_table(EVENTS).metadata.snapshots]
    spark.sql(f"CALL laketide.system.rollback_to_snapshot('{EVENTS}', {ids[5]})")
    append(EVENTS, 8, "w1")
    ids = [s.snapshot_id for s in catalog.load_table(EVENTS).metadata.snapshots]
    for batch in range(3):
        append("snaptest.zipped", batch, "w1")
    for batch in range(5):
        append("snaptest.expired", batch, "w1")
    spark.sql("CALL laketide.system.expire_snapshots(table => 'snaptest.expired', "
              "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 2)")
    return {"catalog": catalog, "ids": ids}


def stops(ids: list[int]) -> list[Stop]:
    return [
        None,
        lambda s: True,  # the current snapshot only
        lambda s: s.summary.get(WRITER) == "w2",  # the newest commit of a writer: batch 2 (6 was rolled back)
        lambda s: s.snapshot_id == ids[1],
        lambda s: s.summary.get(WRITER) == "nobody",  # never: the whole lineage
    ]


@pytest.mark.slow
def test_java_metadata_layout(spark_tables: dict[str, Any]) -> None:
    """What the fast path relies on, checked on a file Spark wrote: compact JSON, current-snapshot-id in the head."""
    raw = read_metadata(spark_tables["catalog"], EVENTS)
    metadata = json.loads(raw)
    assert list(metadata) == JAVA_KEYS
    assert json.dumps(metadata, separators=(",", ":")).encode() == raw  # compact, no whitespace
    assert raw.index(b'"current-snapshot-id"') < raw.index(b'"snapshots"') < raw.index(b'"snapshot-log"')
    first, second = metadata["snapshots"][:2]
    assert list(first) == ["sequence-number", "snapshot-id", "timestamp-ms", "summary", "manifest-list", "schema-id"]
    assert list(second)[:3] == ["sequence-number", "snapshot-id", "parent-snapshot-id"]
    assert all(list(entry) == ["timestamp-ms", "snapshot-id"] for entry in metadata["snapshot-log"])
    assert all(list(entry) == ["timestamp-ms", "metadata-file"] for entry in metadata["metadata-log"])
    # the snapshot list is in commit order, the lineage is not: the two rolled-back snapshots come before the last
    assert len(metadata["snapshots"]) == 9 and metadata["current-snapshot-id"] == spark_tables["ids"][-1]


@pytest.mark.slow
def test_spark_table_lineage_matches_pyiceberg(spark_tables: dict[str, Any], spy: Spy) -> None:
    catalog, ids = spark_tables["catalog"], spark_tables["ids"]
    metadata = catalog.load_table(EVENTS).metadata
    for tail_bytes in (64, 512, 4096, 256 * 1024):
        for stop in stops(ids):
            assert lineage(catalog, EVENTS, stop, tail_bytes=tail_bytes) == expected(metadata, stop)

    current, lin = lineage(catalog, EVENTS)
    assert current == ids[8]
    assert [s.snapshot_id for s in lin] == [ids[8], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]]
    assert [s.summary[BATCH] for s in lin] == ["8", "5", "4", "3", "2", "1", "0"]
    assert lin[0].parent_id == ids[5] and lin[-1].parent_id is None
    assert lin[0].summary["operation"] == "append" and lin[0].sequence_number == 9

    _, lin = lineage(catalog, EVENTS, lambda s: s.summary.get(WRITER) == "w2", tail_bytes=512)
    assert [s.summary[BATCH] for s in lin] == ["8", "5", "4", "3", "2"]  # not batch 6: rolled back

    # the fast path really ran for a small window (the file is bigger than 2 * 512 bytes), the full parse for a big one
    spy.reset()
    lineage(catalog, EVENTS, lambda s: True, tail_bytes=512)
    assert spy.full_parses == 0
    lineage(catalog, EVENTS, lambda s: True)
    assert spy.full_parses == 1


@pytest.mark.slow
def test_writer_marker_ignores_rolled_back_commits(spark_tables: dict[str, Any]) -> None:
    """The writer's dedupe lookup: w2's batch 6 was rolled back, so its newest commit is batch 2 (and 6 is
    written again on replay); w1's is batch 8, the current snapshot."""
    catalog, ids = spark_tables["catalog"], spark_tables["ids"]
    w2 = table_marker(catalog, EVENTS, "w2")
    assert w2 is not None and (w2.batch_id, w2.snapshot_id) == (2, ids[2])
    assert should_write(6, w2)
    w1 = table_marker(catalog, EVENTS, "w1")
    assert w1 is not None and (w1.batch_id, w1.snapshot_id) == (8, ids[8])
    assert table_marker(catalog, EVENTS, "nobody") is None


@pytest.mark.slow
def test_gzip_metadata_from_spark(spark_tables: dict[str, Any], spy: Spy) -> None:
    catalog = spark_tables["catalog"]
    location = metadata_location(catalog, "snaptest.zipped")
    assert location.endswith(".gz.metadata.json")
    metadata = catalog.load_table("snaptest.zipped").metadata
    for tail_bytes in (64, 256 * 1024):
        assert lineage(catalog, "snaptest.zipped", tail_bytes=tail_bytes) == expected(metadata)
    assert len(expected(metadata)[1]) == 3 and spy.full_parses == 2


@pytest.mark.slow
def test_expired_parent_ends_the_lineage(spark_tables: dict[str, Any], spy: Spy) -> None:
    """After expiry the oldest snapshot left still names its (gone) parent: the lineage ends there, as in pyiceberg."""
    catalog = spark_tables["catalog"]
    metadata = catalog.load_table("snaptest.expired").metadata
    assert len(metadata.snapshots) == 2 and metadata.snapshots[0].parent_snapshot_id is not None
    for tail_bytes in (64, 512, 256 * 1024):
        current, lin = lineage(catalog, "snaptest.expired", tail_bytes=tail_bytes)
        assert (current, lin) == expected(metadata)
        assert [s.summary[BATCH] for s in lin] == ["4", "3"] and lin[-1].parent_id is not None
    assert spy.full_parses == 3  # a parent that is not there is only known to be gone after a full parse


@pytest.mark.slow
def test_empty_and_missing_tables(spark_tables: dict[str, Any]) -> None:
    catalog = spark_tables["catalog"]
    assert lineage(catalog, "snaptest.empty") == (None, [])
    assert lineage(catalog, "snaptest.empty", tail_bytes=64) == (None, [])
    with pytest.raises(TableNotFoundError, match=r"'snaptest\.nope'.*start the stream's ingest DAG once") as err:
        lineage(catalog, "snaptest.nope")
    assert isinstance(err.value, LaketideError)


# --- a long history: Spark's layout, 10,000 snapshots ----------------------------------------------------------


def long_history(catalog: SqlCatalog, count: int) -> tuple[str, list[int]]:
    """Register snaptest.history<count>: the events table's metadata with ``count`` snapshots in one lineage,
    each a copy of a real Spark snapshot with laketide's summary, written in Java's compact format and key order."""
    metadata = json.loads(read_metadata(catalog, EVENTS))
    base = metadata["snapshots"][-1]
    sids = [1_000_000_000_000_000_000 + 7919 * i for i in range(count)]
    snaps, log = [], []
    for i, sid in enumerate(sids):
        stamp = base["timestamp-ms"] + 1000 * i
        summary = base["summary"] | {
            BATCH: str(i), "laketide.source-files": json.dumps([f"20261122T03-web01-{i:08d}-9a84ed0a.jsonl"] * 3),
            "laketide.partition-rows": '{"2026-11-22T03:00:00+00:00":500}', "laketide.valid-rows": "500",
            "laketide.watermark": "2026-11-22T03:15:07.123000+00:00", "laketide.rejected-rows": "3",
        }
        snap = {"sequence-number": i + 1, "snapshot-id": sid, "parent-snapshot-id": sids[i - 1] if i else None,
                "timestamp-ms": stamp, "summary": summary, "manifest-list": base["manifest-list"], "schema-id": 0}
        snaps.append({k: v for k, v in snap.items() if v is not None})
        log.append({"timestamp-ms": stamp, "snapshot-id": sid})
    metadata.update({
        "last-sequence-number": count, "last-updated-ms": log[-1]["timestamp-ms"], "current-snapshot-id": sids[-1],
        "refs": {"main": {"snapshot-id": sids[-1], "type": "branch"}}, "snapshots": snaps, "snapshot-log": log,
    })
    folder = Path(metadata["location"].removeprefix("file://")) / "metadata"
    path = folder / f"{90000 + count}-synthetic-{count}.metadata.json"
    path.write_bytes(json.dumps(metadata, separators=(",", ":")).encode())
    identifier = f"snaptest.history{count}"
    catalog.register_table(identifier, f"file:{path}")  # inserts the catalog row (and parses the file once)
    return identifier, sids


@pytest.fixture(scope="module")
def histories(spark_tables: dict[str, Any]) -> dict[int, tuple[str, list[int]]]:
    return {count: long_history(spark_tables["catalog"], count) for count in (2_000, 10_000)}


@pytest.mark.slow
def test_long_history_reads_only_the_newest(spark_tables: dict[str, Any], histories: dict[int, Any],
                                            spy: Spy) -> None:
    catalog = spark_tables["catalog"]
    read: dict[int, int] = {}
    for count, (identifier, sids) in histories.items():
        size = len(read_metadata(catalog, identifier))
        for tail_bytes in (512, 256 * 1024):
            spy.reset()
            current, lin = lineage(catalog, identifier, lambda s, sids=sids: s.snapshot_id == sids[-5],
                                   tail_bytes=tail_bytes)
            assert current == sids[-1]
            assert [s.snapshot_id for s in lin] == sids[:-6:-1]
            assert [s.parent_id for s in lin] == sids[-2:-7:-1]
            assert [s.summary[BATCH] for s in lin] == [str(i) for i in range(count - 1, count - 6, -1)]
            assert spy.full_parses == 0
            # the 64 KiB head, a few 8 KiB probes, the window(s): far below the file, and below 512 KiB
            assert spy.bytes_read < min(size / 5, 512 * 1024), (count, tail_bytes, spy.reads, size)
        read[count] = spy.bytes_read
    # five times the history (12.6 MB), about the same bytes read: only a few more 8 KiB probes find the log
    assert read[10_000] - read[2_000] <= 6 * snapshots.PROBE_BYTES, read
    assert len(read_metadata(catalog, histories[10_000][0])) > 25 * read[10_000]


@pytest.mark.slow
def test_long_history_full_walk_matches_pyiceberg(spark_tables: dict[str, Any], histories: dict[int, Any]) -> None:
    catalog = spark_tables["catalog"]
    identifier, sids = histories[10_000]
    metadata = catalog.load_table(identifier).metadata
    current, lin = lineage(catalog, identifier)
    assert (current, lin) == expected(metadata)
    assert [s.snapshot_id for s in lin] == sids[::-1]
    stop: Stop = lambda s: s.summary[BATCH] == "9000"
    assert lineage(catalog, identifier, stop, tail_bytes=4096) == expected(metadata, stop)


# --- metadata written by pyiceberg ------------------------------------------------------------------------------


@pytest.fixture
def py_catalog(tmp_path: Path) -> Iterator[SqlCatalog]:
    catalog = SqlCatalog("laketide", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh",
                         schema_version="v1")
    catalog.create_namespace("snaptest")
    yield catalog
    catalog.engine.dispose()


def py_table(catalog: SqlCatalog, identifier: str, appends: int, **properties: str) -> list[int]:
    table = catalog.create_table(identifier, Schema(NestedField(1, "id", LongType(), required=False)),
                                 properties=properties)
    for batch in range(appends):
        table.append(pa.table({"id": pa.array([batch], pa.int64())}),
                     snapshot_properties={WRITER: "w2" if batch == 2 else "w1", BATCH: str(batch)})
    return [s.snapshot_id for s in table.metadata.snapshots]


def test_pyiceberg_metadata_matches(py_catalog: SqlCatalog, spy: Spy) -> None:
    ids = py_table(py_catalog, "snaptest.py", 6)
    raw = read_metadata(py_catalog, "snaptest.py")
    # pyiceberg also writes current-snapshot-id before the snapshots (then snapshot-log, ..., refs, format-version)
    assert raw.index(b'"current-snapshot-id"') < raw.index(b'"snapshots"') < raw.index(b'"snapshot-log"')
    assert list(json.loads(raw))[-1] == "last-sequence-number"
    metadata = py_catalog.load_table("snaptest.py").metadata
    for tail_bytes in (64, 512, 256 * 1024):
        for stop in stops(ids):
            assert lineage(py_catalog, "snaptest.py", stop, tail_bytes=tail_bytes) == expected(metadata, stop)
    spy.reset()
    _, lin = lineage(py_catalog, "snaptest.py", lambda s: True, tail_bytes=512)
    assert [s.snapshot_id for s in lin] == [ids[-1]] and spy.full_parses == 0
    assert lin[0].summary[WRITER] == "w1" and lin[0].summary["operation"] == "append"


def test_current_snapshot_id_beyond_the_head_falls_back(py_catalog: SqlCatalog, spy: Spy) -> None:
    # table properties come before current-snapshot-id: 100 KB of them push it out of the 64 KiB head
    py_table(py_catalog, "snaptest.wide", 4, **{"laketide.note": "x" * 100_000})
    raw = read_metadata(py_catalog, "snaptest.wide")
    assert raw.index(b'"current-snapshot-id"') > snapshots.HEAD_BYTES
    metadata = py_catalog.load_table("snaptest.wide").metadata
    assert lineage(py_catalog, "snaptest.wide", tail_bytes=512) == expected(metadata)
    assert spy.full_parses == 1 and len(expected(metadata)[1]) == 4


def test_gzip_named_metadata_json_gz(py_catalog: SqlCatalog, tmp_path: Path, spy: Spy) -> None:
    """The older gzip name (``.metadata.json.gz``), which pyiceberg does not decompress: found by the gzip magic."""
    from pyiceberg.catalog.sql import IcebergTables
    from sqlalchemy import update

    py_table(py_catalog, "snaptest.src", 3)
    metadata = py_catalog.load_table("snaptest.src").metadata
    path = tmp_path / "00009-old.metadata.json.gz"
    path.write_bytes(gzip.compress(read_metadata(py_catalog, "snaptest.src")))
    with py_catalog.engine.begin() as conn:
        conn.execute(update(IcebergTables).where(IcebergTables.table_name == "src")
                     .values(metadata_location=f"file://{path}"))
    assert lineage(py_catalog, "snaptest.src", tail_bytes=64) == expected(metadata)
    assert len(expected(metadata)[1]) == 3 and spy.full_parses == 1


def test_empty_and_missing_pyiceberg_tables(py_catalog: SqlCatalog) -> None:
    py_table(py_catalog, "snaptest.nothing", 0)
    assert lineage(py_catalog, "snaptest.nothing") == (None, [])
    with pytest.raises(TableNotFoundError, match="ingest DAG"):
        metadata_location(py_catalog, "snaptest.absent")
