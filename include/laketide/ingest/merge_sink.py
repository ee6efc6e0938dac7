"""The merge sink: an upsert stream's changes merged into its keyed table, after they are in its change log (the
tables themselves: ``laketide.ingest.upsert_tables``).

An upsert stream (``upsert`` in its configuration, ``laketide.config.upsert``) keeps every change in the stream's
``table``, the change log: an append table written by the exactly-once writer of every stream
(``laketide.ingest.writer``), hour-partitioned by change time, verified and closed as any stream. The merged table
(``upsert.table``) is derived from the change log, one row per key, after each batch's change-log commit:

1. **What is new**: the change-log rows appended since the change-log snapshot the merged table's newest commit
   names (``laketide.changelog-snapshot``), up to the change log's current snapshot: Iceberg's incremental read.
2. **Fold**: the newest change per key, by :data:`ORDER` (the sequence field; on a tie a delete wins, then the greater
   event id): a total order over changes, so the result does not depend on the order they landed in.
3. **Tombstones first**: the folded deletes are appended to ``<table>__tombstones`` (key, sequence, event id), then
4. **the merge** into the merged table: a change newer than the row replaces it (a delete removes it); a key with
   no row gets the change unless it is a delete or older than one of the key's tombstones (a late insert of a
   deleted key does not come back). The commits carry ``laketide.writer-id``, ``laketide.batch-id`` and the
   change-log snapshot they applied through. A batch of up to :data:`BROADCAST_CHANGES` folded changes into a table
   of ``upsert.staged_merge_rows`` rows or more is merged on a staging branch (a ``MERGE`` with only ``WHEN
   MATCHED`` clauses, an inner join that broadcasts the changes, then an append of the keys the table lacks) and
   ``main`` moves there in one commit, only from the head the branch was made at: the table is scanned, never
   shuffled, and readers see the batch whole. Otherwise (a small table, or a catch-up after a long stop) the batch
   is one ``MERGE`` with a ``WHEN NOT MATCHED`` insert: a join that shuffles the whole table, cheaper than the
   staging's fixed costs while the table is small.

**Exactly once** rests on two facts. The change log is written exactly once by the fenced writer. The merge is an
idempotent fold (each key's row is the greatest change seen, a last-writer-wins register under a total order):
applying a change twice, or an older one after a newer, changes nothing. So a batch killed anywhere is made whole
by the next batch or start (it applies everything after the snapshot the merged table names), a zombie that merges
after its replacement changes no row, and no marker walk is needed for correctness: the markers say what was
applied, for the operator and the checks.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from laketide import logs
from laketide.config import LaketideConfig, StreamConfig
from laketide.config.upsert import DELETE_OPERATIONS, OPERATION_KINDS, tombstones_table
from laketide.errors import MainMovedError, WriterFencedError
from laketide.ingest import faultpoints as faults
from laketide.ingest import sink
from laketide.ingest.public_sink import StagingBranch, branch_prefix, snapshot_options
from laketide.ingest.upsert_tables import merged_columns, quoted
from laketide.ingest.writer import BatchWriter
from laketide.lake import commits
from laketide.lake.internals import gateway, iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("laketide.ingest.merge_sink")

#: a folded change's columns beside the stream's fields: a delete (true) or an upsert, and what its operation
#: says of the key (``config.upsert.OPERATION_KINDS``: insert, update, upsert, delete)
DELETE = "_delete"
KIND = "_kind"
#: the change-log snapshot a merged-table commit applied through, and the change-log rows it read
APPLIED = "laketide.changelog-snapshot"
CHANGES = "laketide.changes"
DELETES = "laketide.deletes"
#: a batch of at most this many folded changes into a big table is merged on a staging branch with the changes
#: broadcast (the table scanned, not shuffled); more: one ``MERGE`` (the driver does not hold them)
BROADCAST_CHANGES = 250_000
#: seconds the merge waits for the fold's figures counted during its checkpoint (else it counts them again)
OBSERVATION_WAIT = 10.0
#: prefix of the merge's staging branches (then the stream's name)
MERGE_PREFIX = "laketide_merge_"


def merge_prefix(stream: StreamConfig) -> str:
    """Prefix of the merge's staging branches of ``stream``."""
    return branch_prefix(MERGE_PREFIX, stream.name)


def is_delete(stream: StreamConfig) -> Column:
    """True for a change whose operation deletes its key."""
    from pyspark.sql import functions as F

    assert stream.upsert is not None
    return F.col(quoted(stream.upsert.operation_field)).isin(*DELETE_OPERATIONS)


def fold(changes: DataFrame, stream: StreamConfig) -> DataFrame:
    """The newest change of each key among ``changes`` (rows of the change log): the merged table's columns and
    :data:`DELETE`. Newest: the greatest sequence value; on a tie a delete, then the greatest event id."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    upsert = stream.upsert
    assert upsert is not None
    order = Window.partitionBy(*[quoted(k) for k in upsert.primary_key]).orderBy(
        F.col(quoted(upsert.sequence_field)).desc(), F.col(DELETE).desc(), F.col(quoted(stream.event_id_field)).desc())
    kinds = F.create_map(*[F.lit(x) for pair in OPERATION_KINDS.items() for x in pair])
    kind = F.coalesce(kinds[F.col(quoted(upsert.operation_field))], F.col(quoted(upsert.operation_field)))
    return (changes.select(*[quoted(c) for c in merged_columns(stream)], is_delete(stream).alias(DELETE),
                           kind.alias(KIND))
            .withColumn("_n", F.row_number().over(order)).where("_n = 1").drop("_n"))


def newer(stream: StreamConfig, change: str, row: str, delete: str) -> str:
    """SQL: change ``change`` is newer than row ``row`` (a live row, or a tombstone when ``delete`` is 'true');
    the order of :func:`fold`."""
    upsert = stream.upsert
    assert upsert is not None
    seq, eid = quoted(upsert.sequence_field), quoted(stream.event_id_field)
    c, r = change, row
    return (f"({c}.{seq} > {r}.{seq} OR ({c}.{seq} = {r}.{seq} AND "
            f"(({c}.{DELETE} AND NOT {delete}) OR ({c}.{DELETE} = {delete} AND {c}.{eid} > {r}.{eid}))))")


def observed(observation: Any, timeout: float) -> dict[str, Any] | None:
    """The metrics of a PySpark ``Observation`` whose action has run, or None when they have not arrived within
    ``timeout`` seconds. Spark hands them over through its listener bus, which drops events when a queue is full;
    ``Observation.get`` would then wait forever (the waiting thread is left behind, a daemon)."""
    import threading

    got: list[dict[str, Any]] = []
    waiter = threading.Thread(target=lambda: got.append(observation.get), daemon=True, name="laketide-observation")
    waiter.start()
    waiter.join(timeout)
    return got[0] if got else None


def applied_through(table: Any) -> int | None:
    """The change-log snapshot the newest merge into the Java ``table`` applied through (None: none yet)."""
    table.refresh()
    snap = table.currentSnapshot()
    while snap is not None:
        summary = snap.summary()
        if summary is not None and summary.get(APPLIED) is not None:
            return int(summary.get(APPLIED))
        parent = snap.parentId()
        snap = None if parent is None else table.snapshot(parent)
    return None


def table_rows(table: Any) -> int:
    """The rows of the Java ``table``'s data files at its current snapshot, from its summary (rows its position
    deletes remove included): 0 without a snapshot."""
    snap = table.currentSnapshot()
    summary = None if snap is None else snap.summary()
    value = None if summary is None else summary.get("total-records")
    return int(value) if value is not None else 0


class _Call:
    """A py4j ``Callable`` running a Python function (Iceberg's ``CommitMetadata`` runs it with the properties set)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # handed back to the caller, which re-raises it
            self.error = exc
            raise

    class Java:
        implements = ["java.util.concurrent.Callable"]


def with_properties(spark: SparkSession, props: dict[str, str], run: Any) -> None:
    """Run ``run`` (Spark SQL writes) so that the Iceberg commits it makes carry ``props`` in their summary."""
    jvm, _ = gateway(spark)
    jmap = jvm.java.util.HashMap()
    for key, value in props.items():
        jmap.put(key, value)
    call = _Call(run)
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            jmap, call, jvm.java.lang.Class.forName("java.lang.RuntimeException"))
    except Exception:
        if call.error is not None:
            raise call.error from None
        raise


class MergeSink:
    """Applies an upsert stream's change log to its merged table (see the module's description)."""

    def __init__(self, config: LaketideConfig, stream: StreamConfig) -> None:
        assert stream.upsert is not None
        self.config = config
        self.stream = stream
        self.upsert = stream.upsert
        self.prefix = config.catalog.name

    def catch_up(self, spark: SparkSession, batch_id: int) -> int:
        """Merge every change-log row not yet applied; returns the changes read (0: the merged table was current)."""
        stream, upsert = self.stream, self.upsert
        changelog = iceberg_table(spark, f"{self.prefix}.{stream.table}")
        head = changelog.currentSnapshot()
        if head is None:
            return 0
        target = int(head.snapshotId())
        merged = iceberg_table(spark, f"{self.prefix}.{upsert.table}")
        applied = applied_through(merged)
        if applied == target:
            return 0
        started = time.monotonic()
        reader = spark.read.format("iceberg")
        jvm, _ = gateway(spark)
        if applied is not None and not jvm.org.apache.iceberg.util.SnapshotUtil.isAncestorOf(
                changelog, target, applied):
            # the change log was rolled back (a redo) past what the merged table applied, or expiry removed that
            # snapshot (a merge left undone for longer than the change log keeps snapshots): rebuilt from the log
            log.warning("the merged table %s applied change-log snapshot %d, which is not in the change log's "
                        "history any more (a redo rolled it back, or snapshot expiry removed it): rebuilding it from "
                        "the change log", upsert.table, applied)
            return self.rebuild(spark, target, batch_id)
        if applied is None:
            changes = reader.option("snapshot-id", target).load(f"{self.prefix}.{stream.table}")
        else:
            changes = (reader.option("start-snapshot-id", applied).option("end-snapshot-id", target)
                       .load(f"{self.prefix}.{stream.table}"))
        folded, (total, deletes, props) = self._folded(changes, batch_id, target)  # one read for both merges
        folded_at = time.monotonic()
        view = f"laketide_changes_{stream.name.replace('-', '_').replace('.', '_')}"
        folded.createOrReplaceTempView(view)
        try:
            if deletes:
                faults.maybe_pause("before_tombstones", batch_id, stream.name)
                self._check_unmoved(merged, applied, batch_id)
                self._tombstones(spark, view, props)
            tombstoned_at = time.monotonic()
            faults.maybe_pause("before_merge", batch_id, stream.name)
            self._check_unmoved(merged, applied, batch_id)
            self.apply(spark, merged, view, total, props, applied, batch_id)
        finally:
            spark.catalog.dropTempView(view)
            folded.unpersist()
        faults.maybe_pause("after_merge", batch_id, stream.name)
        done = time.monotonic()
        log.info("batch %d merged into %s: %d key(s) changed, %d deleted, through change-log snapshot %d (fold %.2fs, "
                 "tombstones %.2fs, merge %.2fs; %.2fs)", batch_id, upsert.table, total - deletes, deletes, target,
                 folded_at - started, tombstoned_at - folded_at, done - tombstoned_at, done - started)
        return total

    def apply(self, spark: SparkSession, merged: Any, view: str, total: int, props: dict[str, str],
              applied: int | None, batch_id: int) -> None:
        """Merge the ``total`` folded changes of ``view`` into the merged (Java) table ``merged``, in commits carrying
        ``props``; ``applied``: the change-log snapshot it applied through when the merge started."""
        if total <= BROADCAST_CHANGES and table_rows(merged) >= self.upsert.staged_merge_rows:
            self._merge_staged(spark, merged, view, props, applied, batch_id)
        else:  # a small table (its shuffle is cheap), or too many changes to broadcast: one MERGE
            with_properties(spark, props, lambda: spark.sql(self._merge_sql(view)))

    def _merge_staged(self, spark: SparkSession, merged: Any, view: str, props: dict[str, str], applied: int | None,
                      batch_id: int) -> None:
        """The folded changes of ``view`` applied on a staging branch of the merged table, then ``main`` moved there
        in one commit (``public_sink.StagingBranch``): a ``MERGE`` with only ``WHEN MATCHED`` clauses (an inner join
        that broadcasts the changes: the table is scanned, never shuffled), then an append of the upserts whose key
        the table lacks (a semi join of the table's keys with the broadcast changes). Both commits carry ``props``;
        readers of ``main`` see the batch whole or not at all."""
        from pyspark.sql import functions as F

        keys = list(self.upsert.primary_key)
        computed = spark.sql(self._source_sql(view)).localCheckpoint()  # computed once, for both steps
        staging = StagingBranch(merged, f"{self.prefix}.{self.upsert.table}", merge_prefix(self.stream),
                                batch_id)
        changes = f"{view}_source"
        F.broadcast(computed).createOrReplaceTempView(changes)  # the MERGE's inner join builds on the changes
        try:
            with_properties(spark, props, lambda: spark.sql(self._merge_sql(changes, staging.identifier, False)))
            present = (spark.table(staging.identifier).select(*keys)
                       .join(F.broadcast(computed.select(*keys)), keys, "left_semi"))
            (computed.where(~F.col(DELETE)).join(present, keys, "left_anti")
             .select(*[quoted(c) for c in merged_columns(self.stream)])
             .writeTo(staging.identifier).options(**snapshot_options(props)).append())
            faults.maybe_pause("merge_staged", batch_id, self.stream.name)
            staging.swap(writes=None, before=lambda _: self._check_unmoved(merged, applied, batch_id))
        except BaseException:
            staging.drop()
            raise
        finally:
            spark.catalog.dropTempView(changes)
            computed.unpersist()

    def _check_unmoved(self, merged: Any, applied: int | None, batch_id: int) -> None:
        """Before a commit: the merged table still names the change-log snapshot this merge started from. Another
        writer of the stream merged meanwhile (this one was frozen, then overtaken): it stops. A merge that another
        one overtakes after this check fails its commit instead (serializable isolation, ``merged_properties``)."""
        now = applied_through(merged)
        if now != applied:
            raise WriterFencedError(
                f"writer {self.stream.writer_id!r}, batch {batch_id}: the merged table {self.upsert.table} moved on "
                f"under this writer (it applied change-log snapshot {now}, not {applied} as when this merge started): "
                "another writer of the stream has merged; this one stops without merging. Check that only one "
                "writer of the stream runs.")

    def _folded(self, changes: DataFrame, batch_id: int, target: int) -> tuple[DataFrame, tuple[int, int,
                                                                                                 dict[str, str]]]:
        """The fold of ``changes`` computed once (a local checkpoint: both merges read it), and its figures
        (:meth:`_figures`), counted by the same job (an observation of the checkpoint's pass)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        kinds = sorted(set(OPERATION_KINDS.values()))
        kind = F.col(KIND)
        observation = Observation(f"laketide_fold_{uuid.uuid4().hex}")
        folded = fold(changes, self.stream).observe(
            observation, F.count(F.lit(1)).alias("total"), F.count_if(F.col(DELETE)).alias("deletes"),
            F.count_if(kind.isNull() | ~kind.isin(*kinds)).alias("other"),
            *[F.count_if(kind == k).alias(k) for k in kinds]).localCheckpoint()
        seen = observed(observation, OBSERVATION_WAIT)
        if seen is not None and not seen["other"]:
            by_kind = {k: int(seen[k]) for k in kinds if seen[k]}
            return folded, self._figures(int(seen["total"]), int(seen["deletes"]), by_kind, batch_id, target)
        # no observation in time (Spark's listener bus dropped or delayed it), or an operation of no known kind (the
        # configuration's check keeps those out of the change log): counted by a job over the checkpoint
        counts = folded.groupBy(DELETE, KIND).count().collect()
        by_kind = {}
        for r in counts:
            by_kind[str(r[KIND])] = by_kind.get(str(r[KIND]), 0) + int(r["count"])
        deletes = sum(int(r["count"]) for r in counts if r[DELETE])
        return folded, self._figures(sum(by_kind.values()), deletes, by_kind, batch_id, target)

    def _figures(self, total: int, deletes: int, kinds: dict[str, int], batch_id: int,
                 target: int) -> tuple[int, int, dict[str, str]]:
        """The folded changes and deletes, and the summary properties of the commits applying them."""
        props = {commits.WRITER_ID: self.stream.writer_id, commits.BATCH_ID: str(batch_id), APPLIED: str(target),
                 CHANGES: str(total), DELETES: str(deletes),
                 commits.OPERATIONS: json.dumps(dict(sorted(kinds.items())))}
        return total, deletes, props

    def rebuild(self, spark: SparkSession, target: int, batch_id: int) -> int:
        """Replace the merged table and the tombstones with the fold of the whole change log at snapshot ``target``
        (after a redo rolled the change log back): what a fresh replay of the change log gives."""
        from pyspark.sql import functions as F

        stream, upsert = self.stream, self.upsert
        changes = spark.read.format("iceberg").option("snapshot-id", target).load(f"{self.prefix}.{stream.table}")
        folded, (total, deletes, props) = self._folded(changes, batch_id, target)
        options = snapshot_options(props)
        tomb_columns = [*upsert.primary_key, upsert.sequence_field, stream.event_id_field]
        try:
            (folded.where(F.col(DELETE)).select(*[quoted(c) for c in tomb_columns],
                                                F.current_timestamp().alias("recorded_at"))
             .writeTo(f"{self.prefix}.{tombstones_table(upsert)}").options(**options).overwrite(F.lit(True)))
            (folded.where(~F.col(DELETE)).select(*[quoted(c) for c in merged_columns(stream)])
             .writeTo(f"{self.prefix}.{upsert.table}").options(**options).overwrite(F.lit(True)))
        finally:
            folded.unpersist()
        log.info("merged table %s rebuilt from the change log through snapshot %d: %d live key(s), %d tombstone(s)",
                 upsert.table, target, total - deletes, deletes)
        return total

    def _keys_match(self, left: str, right: str) -> str:
        return " AND ".join(f"{left}.{quoted(k)} = {right}.{quoted(k)}" for k in self.upsert.primary_key)

    def _tombstones(self, spark: SparkSession, view: str, props: dict[str, str]) -> None:
        """The folded deletes appended to the tombstones table (a key may have several: the newest one counts; an
        append costs a fraction of a merge)."""
        from pyspark.sql import functions as F

        upsert, stream = self.upsert, self.stream
        cols = [*upsert.primary_key, upsert.sequence_field, stream.event_id_field]
        (spark.table(view).where(F.col(DELETE)).select(*[quoted(c) for c in cols],
                                                        F.current_timestamp().alias("recorded_at"))
         .writeTo(f"{self.prefix}.{tombstones_table(upsert)}")
         .options(**snapshot_options(props)).append())

    def _source_sql(self, view: str) -> str:
        """The folded changes of ``view`` that are newer than every tombstone of their key (a change older than one
        is dropped; a delete equal to one is kept: it is that one)."""
        tomb = f"{self.prefix}.{tombstones_table(self.upsert)}"
        return (f"SELECT c.* FROM {view} c LEFT ANTI JOIN (SELECT *, true AS {DELETE} FROM {tomb}) d "
                f"ON {self._keys_match('c', 'd')} AND {newer(self.stream, 'd', 'c', f'c.{DELETE}')}")

    def _merge_sql(self, view: str, target: str | None = None, inserts: bool = True) -> str:
        """The folded changes of ``view`` into the merged table (or ``target``, a branch of it): newer than the row,
        and than every tombstone of the key. Without ``inserts``, ``view`` holds changes already checked against the
        tombstones (:meth:`_source_sql`) and keys the table lacks are left to the caller."""
        upsert, stream = self.upsert, self.stream
        cols = merged_columns(stream)
        source = f"({self._source_sql(view)})" if inserts else view
        sets = ", ".join(f"t.{quoted(c)} = c.{quoted(c)}" for c in cols if c not in upsert.primary_key)
        sql = (
            f"MERGE INTO {target or f'{self.prefix}.{upsert.table}'} t USING {source} c "
            f"ON {self._keys_match('t', 'c')} "
            f"WHEN MATCHED AND c.{DELETE} AND {newer(stream, 'c', 't', 'false')} THEN DELETE "
            f"WHEN MATCHED AND NOT c.{DELETE} AND {newer(stream, 'c', 't', 'false')} THEN UPDATE SET {sets}"
        )
        if inserts:
            sql += (f" WHEN NOT MATCHED AND NOT c.{DELETE} THEN INSERT ({', '.join(quoted(c) for c in cols)}) "
                    f"VALUES ({', '.join('c.' + quoted(c) for c in cols)})")
        return sql


class UpsertWriter(BatchWriter):
    """An upsert stream's batch: the change log's exactly-once commit (the writer of every stream), then the merge
    of what the merged table has not applied yet (this batch's changes, and any a killed run left)."""

    def __init__(self, config: LaketideConfig, stream: StreamConfig, commit_path: str = "internal",
                 summary: dict[str, str] | None = None) -> None:
        super().__init__(config, stream, commit_path, summary)
        self.merge = MergeSink(config, stream)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        super().__call__(batch, batch_id)
        spark = batch.sparkSession
        sqlite = self.iceberg(spark).sqlite

        def attempt() -> int:
            sqlite.reopen()  # the catalog's pooled SQLite connections may hold an old read snapshot (see internals)
            return self.merge.catch_up(spark, batch_id)

        with logs.for_stream(self.stream.name):
            sink.retrying(f"merge of batch {batch_id} of {self.stream.name}", attempt, self.timeout, merge_again)


def catch_up(spark: SparkSession, config: LaketideConfig, stream: StreamConfig) -> int:
    """At the writer's start: the merged table applies what the change log holds and it has not applied yet (a
    merged table dropped to be built again, a merge a failure left undone), instead of waiting for the next batch."""
    merge = MergeSink(config, stream)

    def attempt() -> int:
        return merge.catch_up(spark, -1)

    with logs.for_stream(stream.name):
        return sink.retrying(f"merge of {stream.name} at its start", attempt, config.catalog.retry_timeout,
                             merge_again)


def merge_again(exc: BaseException) -> bool:
    """Worth another merge: the catalog was busy, or a compaction replaced files the merge read (Iceberg refuses
    the merge's commit: ``ValidationException``; the next attempt plans on the compacted table)."""
    if isinstance(exc, WriterFencedError):
        return False
    if isinstance(exc, MainMovedError):  # main moved while the merge was staged on its branch (a compaction)
        return True
    return sink.is_transient(exc) or "ValidationException" in str(exc) or any(
        name.endswith("ValidationException") for name, _ in sink._java_chain(exc))
