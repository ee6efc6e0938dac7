"""The public commit path: a fenced publish built on public Spark and Iceberg APIs only.

Used when ``laketide.lake.internals.check`` finds a Spark or Iceberg the internal path was not written for
(``commit_path: auto``), or when configured (``commit_path: public``). Per table and batch:

1. the table is refreshed and the writer's newest marker on ``main`` is checked: it must be the one the
   batch started from (else :class:`WriterFencedError`);
2. a staging branch is created at ``main``'s head (``ManageSnapshots.createBranch``; on a table without any
   snapshot Iceberg creates an empty one for it, which then becomes the first snapshot of ``main``);
3. the rows are written to that branch with ``DataFrameWriterV2`` (identifier ``<table>.branch_<name>``),
   the marker and the summary as ``snapshot-property.*`` options: one snapshot, on the branch only;
4. ``ManageSnapshots.fastForwardBranch("main", branch)`` and ``removeBranch(branch)``, one commit, after
   checking, on the metadata that commit is built from, that ``main``'s head is still the staging
   snapshot's parent. Iceberg builds that reference update once, from the metadata read when
   ``manageSnapshots()`` was called, and commits it by a compare-and-swap from exactly that metadata: its
   retry after a lost swap re-applies the update against the old base and fails ("Table metadata refresh
   is required"). It never rebases. So ``main`` moves only from the head that was checked.

When the swap fails because ``main`` moved (another writer, a compaction), the branch is dropped and the
whole publish is tried again from step 1: a commit of this batch by another writer of the stream fences
this one; any other commit is built upon by writing the batch again (from the cached rows) on a new branch.
The snapshot of a dropped branch, and its files, are in no lineage: expiry deletes them. Staging branches
left by a killed writer of the same writer id are removed by the next publish.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from laketide.errors import MainMovedError, WriterFencedError
from laketide.ingest import sink
from laketide.lake import commits
from laketide.lake.internals import gateway

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("laketide.ingest.public_sink")
STAGE_PREFIX = "laketide_stage_"


class PublicIceberg:
    """Iceberg's public Java API, reached through the py4j gateway: tables by name."""

    def __init__(self, spark: SparkSession) -> None:
        jvm, self.session = gateway(spark)
        self.spark3util = jvm.org.apache.iceberg.spark.Spark3Util

    def table(self, name: str) -> Any:
        """The Java Iceberg ``Table`` ``name`` (``catalog.namespace.table``), refreshed."""
        table = self.spark3util.loadIcebergTable(self.session, name)
        table.refresh()
        return table


def branch_prefix(kind: str, name: str) -> str:
    """Prefix of staging branches ``kind`` made for ``name`` (a writer id, a stream name), as a branch name must be:
    it is part of a Spark identifier (``<table>.branch_<branch>``), which holds no '-' or '.'."""
    return f"{kind}{re.sub(r'[^A-Za-z0-9_]', '_', name)}_"


def stage_prefix(writer_id: str) -> str:
    """Prefix of the staging branches of ``writer_id`` (the public commit path's)."""
    return branch_prefix(STAGE_PREFIX, writer_id)


def table_marker(table: Any, writer_id: str) -> commits.Marker | None:
    """The newest commit of ``writer_id`` on ``main`` of the Java ``Table`` (public API: current snapshot,
    snapshots by id)."""
    table.refresh()
    return sink.java_marker(table, writer_id)


def drop_branches(table: Any, names: list[str]) -> None:
    """Remove the branches ``names`` of the Java ``table`` in one commit."""
    if not names:
        return
    manage = table.manageSnapshots()
    for name in names:
        manage.removeBranch(name)
    manage.commit()


def is_staging_branch(name: str, prefix: str) -> bool:
    """``name`` is a staging branch of ``prefix`` (:class:`StagingBranch`: the prefix, a batch id, an attempt's id).
    The whole name decides: one stream's prefix can be the start of another's (``a_`` of ``a_b_``)."""
    return re.fullmatch(re.escape(prefix) + r"n?\d+_[0-9a-f]{10}", name) is not None


def _stale_branches(table: Any, prefix: str) -> list[str]:
    return [str(name) for name in table.refs().keySet().toArray() if is_staging_branch(str(name), prefix)]


def _head(table: Any) -> int | None:
    head = table.currentSnapshot()
    return None if head is None else int(head.snapshotId())


def snapshot_options(props: dict[str, str]) -> dict[str, str]:
    """Spark write options that put ``props`` in the summary of the snapshot the write commits."""
    return {f"snapshot-property.{k}": v for k, v in props.items()}


class StagingBranch:
    """A staging branch of the Java ``table`` (Spark identifier ``name``) made at ``main``'s head, for the writes of
    one attempt (staging branches of ``prefix`` left by a killed attempt are removed first); :meth:`swap` moves
    ``main`` to the branch's head in one commit, only from the head the branch was made at (steps 2-4 above)."""

    def __init__(self, table: Any, name: str, prefix: str, batch_id: int) -> None:
        drop_branches(table, _stale_branches(table, prefix))  # left by a killed attempt of this writer id
        self.table, self.name, self.batch_id, self.start = table, name, batch_id, _head(table)
        # batch -1 (a merge at the writer's start, after a redo) as n1: no '-' in a Spark identifier
        self.branch = f"{prefix}{str(batch_id).replace('-', 'n')}_{uuid.uuid4().hex[:10]}"
        manage = table.manageSnapshots()
        (manage.createBranch(self.branch) if self.start is None else
         manage.createBranch(self.branch, self.start)).commit()
        self.base = int(table.snapshot(self.branch).snapshotId())
        #: the branch as a Spark table identifier: what is written to it stays off ``main``
        self.identifier = f"{name}.branch_{self.branch}"

    def swap(self, writes: int | None = 1, before: Callable[[int], object] = lambda _: None) -> int:
        """Move ``main`` to the branch's head and remove the branch, in one commit; returns ``main``'s new head.
        ``writes``: the snapshots the writes made on the branch (None: any number, none included, and then ``main``
        is left as it is). ``before(head)`` is called right before the commit.

        :raises MainMovedError: ``main`` moved since the branch was made (or the branch is not as written)
        """
        manage = self.table.manageSnapshots()  # refreshes: the commit below swaps from exactly this metadata
        snapshot = self.table.snapshot(self.branch)
        made: list[Any] = []
        at = snapshot
        while at is not None and int(at.snapshotId()) != self.base and len(made) < 1000:
            made.append(at)
            at = None if at.parentId() is None else self.table.snapshot(at.parentId())
        if at is None or (writes is not None and len(made) != writes) or _head(self.table) != self.start:
            raise MainMovedError(f"Cannot commit: main of {self.name} moved while batch {self.batch_id} was staged")
        head = int(snapshot.snapshotId())
        before(head)
        if made:
            manage.fastForwardBranch(sink.MAIN_BRANCH, self.branch).removeBranch(self.branch).commit()
        else:
            manage.removeBranch(self.branch).commit()
        return head

    def drop(self) -> None:
        """Remove the branch of a failed attempt (its snapshots are left to expiry), unless already gone (committed,
        or removed by another writer of the same writer id)."""
        with contextlib.suppress(Exception):
            self.table.refresh()
            drop_branches(self.table, [self.branch])


def publish(iceberg: PublicIceberg, name: str, rows: DataFrame, props: dict[str, str], writer_id: str,
            batch_id: int, expected: commits.Marker | None, timeout: timedelta,
            before_attempt: Callable[[], object] = lambda: None,
            staged: Callable[[], object] = lambda: None) -> int:
    """Append ``rows`` to the Iceberg table ``name`` in one snapshot of ``main`` carrying ``props``, fenced:
    only on top of a lineage whose newest commit of ``writer_id`` is ``expected``. Returns the snapshot id.

    :param before_attempt: called before each attempt (the writer renews its SQLite connections there)
    :param staged: called once the rows are written to the staging branch, before ``main`` moves
    :raises WriterFencedError: another writer committed to the table for ``writer_id`` since ``expected``
    """
    ours: set[int] = set()  # staging snapshots this publish tried to put on main

    def attempt() -> int:
        before_attempt()
        table = iceberg.table(name)
        found = sink.java_marker(table, writer_id)
        if found is not None and found.snapshot_id in ours:
            return found.snapshot_id  # an earlier attempt whose outcome was unknown did commit
        if not sink._same(found, expected):
            raise WriterFencedError(sink.fenced_message(writer_id, batch_id, name, found, expected))
        staging = StagingBranch(table, name, stage_prefix(writer_id), batch_id)
        try:
            rows.writeTo(staging.identifier).options(**snapshot_options(props)).append()
            staged()
            return staging.swap(before=ours.add)
        except BaseException:
            staging.drop()
            raise

    return sink.retrying(f"commit of batch {batch_id} to {name}", attempt, timeout,
                         transient=lambda exc: isinstance(exc, MainMovedError) or sink.is_transient(exc))
