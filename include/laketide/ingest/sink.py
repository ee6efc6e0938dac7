"""The internal commit path's publish through Iceberg's Java table API: fenced, and retried while the
catalog is busy (the public path's publish is ``laketide.ingest.public_sink``; both share the retry and the
marker walk defined here).

**The fence.** Iceberg's own commit (``SnapshotProducer.commit``) refreshes the table and re-applies an
append whenever the catalog's compare-and-swap fails, without asking anyone: a writer frozen after its
pre-commit that wakes up after its replacement committed the same batch would append it a second time.
:func:`publish` therefore applies the append itself, checks on the very metadata the new snapshot is based
on that the table's newest commit of this writer is still the one the batch started from, and swaps the
catalog pointer from exactly that metadata (``TableOperations.commit(base, updated)``, one compare-and-swap,
no internal retry). If anyone committed in between, the swap fails and the check runs again on the fresh
metadata: a commit by another writer of the stream raises :class:`WriterFencedError`; any other commit (a
compaction, an expiry) is simply built upon.

**Contention.** A lost swap, SQLite's ``SQLITE_BUSY``/``SQLITE_BUSY_SNAPSHOT``, a PostgreSQL serialization
failure or a dropped connection are normal conditions: :func:`retrying` waits them out with back-off, one
log line per attempt, until ``catalog.retry_timeout``. Retrying is safe because of the fence: an attempt
whose outcome was unknown is recognised on the next one by its snapshot id.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from laketide.errors import CatalogUnavailableError, WriterFencedError
from laketide.lake import commits
from laketide.lake.internals import current_metadata, swap_main

log = logging.getLogger("laketide.ingest.sink")
T = TypeVar("T")
MAIN_BRANCH = "main"

#: Java exception classes (anywhere in the cause chain) that mean "try again": the catalog was busy, changed
#: under the commit, or could not be reached
TRANSIENT_CLASSES = (
    "org.apache.iceberg.exceptions.CommitFailedException",
    "org.apache.iceberg.exceptions.CommitStateUnknownException",
    "org.apache.iceberg.jdbc.UncheckedSQLException",
    "org.sqlite.SQLiteException",
    "org.postgresql.util.PSQLException",
    "java.sql.SQLTransientException",
    "java.sql.SQLRecoverableException",
    "java.sql.SQLNonTransientConnectionException",
    "java.sql.SQLTransientConnectionException",
    "java.net.ConnectException",
)
TRANSIENT_TEXT = ("SQLITE_BUSY", "database is locked", "Connection refused", "connection attempt failed",
                  "terminating connection", "could not serialize access")


def _java_chain(exc: BaseException) -> list[tuple[str, str]]:
    """(class name, message) of the Java exception behind ``exc`` and its causes, if any."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    chain: list[tuple[str, str]] = []
    seen = 0
    while java is not None and seen < 20:
        try:
            chain.append((str(java.getClass().getName()), str(java.getMessage())))
            java = java.getCause()
        except Exception:  # the gateway is gone
            break
        seen += 1
    return chain


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` means the catalog was busy, moved on or unreachable (worth another attempt)."""
    if isinstance(exc, WriterFencedError):
        return False
    chain = _java_chain(exc)
    if any(name in TRANSIENT_CLASSES for name, _ in chain):
        return True
    text = " ".join(message for _, message in chain) or str(exc)
    return any(marker in text for marker in TRANSIENT_TEXT)


def first_line(exc: BaseException) -> str:
    """A one-line description of ``exc`` (the innermost Java cause when there is one)."""
    chain = _java_chain(exc)
    if chain:
        name, message = chain[-1]
        return f"{name.rsplit('.', 1)[-1]}: {message.splitlines()[0] if message else ''}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


#: an exception line of a Java or Python stack: ``[Caused by: ]package.Class[Exception|Error]: message``
_EXCEPTION_LINE = re.compile(r"^\s*(?:Caused by: )?((?:[A-Za-z_$][\w$]*\.)*[A-Z][\w$]*(?:Exception|Error)): (.+)$")
#: wrappers that say where a failure passed, not what it was
_WRAPPERS = ("StreamingQueryException", "Py4JJavaError", "PythonException", "SparkException",
             "ExecutionException", "RuntimeException")


def root_cause(exc: BaseException) -> str:
    """What broke, in one line: the innermost exception named anywhere in ``exc``'s text and Java causes (a
    ``foreachBatch`` failure arrives as a StreamingQueryException holding a Python traceback holding a Java stack),
    wrappers skipped, e.g. ``FileNotFoundException: File file:/.../x.jsonl does not exist``."""
    lines = [f"{name}: {message}" for name, message in _java_chain(exc) if message and message != "None"]
    lines += [f"{m.group(1)}: {m.group(2)}" for m in map(_EXCEPTION_LINE.match, str(exc).splitlines()) if m]
    named = [line for line in lines if line.split(":", 1)[0].rsplit(".", 1)[-1] not in _WRAPPERS]
    chosen = (named or lines or [first_line(exc)])[-1]
    name, _, message = chosen.partition(": ")
    return f"{name.rsplit('.', 1)[-1]}: {message.strip()[:500]}"


def retrying(what: str, action: Callable[[], T], timeout: timedelta,
             transient: Callable[[BaseException], bool] = is_transient) -> T:
    """Run ``action`` until it succeeds, retrying transient catalog errors with jittered back-off.

    :raises CatalogUnavailableError: still failing after ``timeout`` (the last error is chained)
    """
    deadline = time.monotonic() + timeout.total_seconds()
    attempt = 0
    while True:
        attempt += 1
        try:
            return action()
        except Exception as exc:
            if not transient(exc):
                raise
            delay = min(10.0, 0.1 * 2 ** min(attempt, 7)) * (0.5 + random.random())
            if time.monotonic() + delay > deadline:
                raise CatalogUnavailableError(
                    f"{what}: the catalog stayed busy or unreachable for {timeout} ({attempt} attempts; last: "
                    f"{first_line(exc)}). Check the catalog database; catalog.retry_timeout sets how long to wait."
                ) from exc
            log.warning("%s: catalog busy or unreachable (attempt %d, %s); retrying in %.1fs",
                        what, attempt, first_line(exc), delay)
            time.sleep(delay)


def java_marker(metadata: Any, writer_id: str) -> commits.Marker | None:
    """The newest commit of ``writer_id`` in the lineage of the Java ``TableMetadata`` (the table the commit
    goes to). Reads summaries from the current snapshot back to that commit only."""
    snap = metadata.currentSnapshot()
    while snap is not None:
        summary = snap.summary()
        if summary is not None and summary.get(commits.WRITER_ID) == writer_id:
            batch = summary.get(commits.BATCH_ID)
            if batch is not None:
                kept = {commits.WRITER_ID: writer_id, commits.BATCH_ID: str(batch)}
                for key in (commits.WATERMARK, commits.SOURCE_FILES):  # the files: a replayed batch is checked
                    value = summary.get(key)
                    if value is not None:
                        kept[key] = str(value)
                return commits.Marker(int(snap.snapshotId()), int(batch), kept)
        parent = snap.parentId()
        snap = None if parent is None else metadata.snapshot(parent)
    return None


def table_marker(table: Any, writer_id: str) -> commits.Marker | None:
    """``java_marker`` of the Java table's current metadata, refreshed from the catalog."""
    table.refresh()
    return java_marker(current_metadata(table), writer_id)


def _same(a: commits.Marker | None, b: commits.Marker | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and a.snapshot_id == b.snapshot_id)


def fenced_message(writer_id: str, batch_id: int, name: str, found: commits.Marker | None,
                   expected: commits.Marker | None) -> str:
    """What a fenced writer reports: the table's newest commit of the writer id is not the expected one."""
    return (
        f"writer {writer_id!r}, batch {batch_id}: table {name} moved on under this writer: its newest "
        f"commit of {writer_id!r} is batch {found.batch_id if found else None} (snapshot "
        f"{found.snapshot_id if found else None}), not the one this batch started from (batch "
        f"{expected.batch_id if expected else None}, snapshot {expected.snapshot_id if expected else None})."
        " Another writer of this stream has committed; this one stops without committing (its data "
        "files are orphans for the cleaner). Check that only one writer of the stream runs."
    )


def publish(metadata_class: Any, table: Any, data_files: list[Any], props: dict[str, str], writer_id: str,
            batch_id: int, expected: commits.Marker | None, timeout: timedelta,
            before_attempt: Callable[[], object] = lambda: None) -> int:
    """Append ``data_files`` to the Java ``table`` in one snapshot carrying ``props``, fenced: only on top
    of a lineage whose newest commit of ``writer_id`` is ``expected``. Returns the snapshot id.

    :param metadata_class: the JVM's ``org.apache.iceberg.TableMetadata`` class (py4j)
    :param before_attempt: called before each attempt (the writer renews its SQLite connections there)

    :raises WriterFencedError: another writer committed to the table for ``writer_id`` since ``expected``
    """
    append = table.newFastAppend()  # kept across attempts: its manifests are written once
    for data_file in data_files:
        append.appendFile(data_file)
    for key, value in props.items():
        append.set(key, value)
    name = str(table.name())

    def attempt() -> int:
        before_attempt()
        snapshot = append.apply()  # refreshes the table, then builds the snapshot on its current metadata
        base = current_metadata(table)
        staged_id = int(snapshot.snapshotId())
        head = base.currentSnapshot()
        if (None if head is None else int(head.snapshotId())) != (
                None if snapshot.parentId() is None else int(snapshot.parentId())):
            raise RuntimeError("Cannot commit: table metadata changed while the snapshot was built")
        found = java_marker(base, writer_id)
        if found is not None and found.snapshot_id == staged_id:
            return staged_id  # an earlier attempt whose outcome was unknown did commit
        if not _same(found, expected):
            raise WriterFencedError(fenced_message(writer_id, batch_id, name, found, expected))
        swap_main(metadata_class, table, base, snapshot)  # one compare-and-swap from exactly the metadata checked
        return staged_id

    return retrying(f"commit of batch {batch_id} to {name}", attempt, timeout,
                    transient=lambda exc: is_transient(exc) or "metadata changed while" in str(exc))

