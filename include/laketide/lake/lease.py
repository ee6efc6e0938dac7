"""One live writer per stream: a lease row in the catalog database, renewed by the writer's heartbeat.

A writer takes the lease of its writer id before it touches the tables and renews it every quarter of
``writer_lease``. A second writer of the same stream refuses to start while the lease is live, with a message
naming the holder; it takes over when the holder's heartbeat is older than ``writer_lease`` (the holder is
silent: dead, frozen or cut off) or, on the same host, at once when the holder's process is gone.

The lease keeps two writers from running side by side; it cannot stop a frozen writer that wakes up after
its lease was taken. That one is stopped by the commit fence (``laketide.ingest.sink``): a batch commits only if the
table's newest commit of the writer is the one the batch started from. A writer that finds its lease taken
stops between batches.

The lease lives in the catalog's database (table ``laketide_writer_leases``) so that it is shared wherever
the catalog is: SQLite for one machine, PostgreSQL for many. Heartbeats use each host's clock: keep clocks
in sync (NTP) and ``writer_lease`` well above any skew.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from laketide.errors import WriterBusyError

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Engine

    from laketide.config import CatalogConfig

log = logging.getLogger("laketide.lake.lease")
TABLE = "laketide_writer_leases"
#: the mode of a redo holding a stream's writer lease (the writer resumes after it)
REDO_MODE = "redo"
#: the lease maintenance holds on a table while it rewrites it (``maintain:<table>``); a redo holds it too
MAINTENANCE_PREFIX = "maintain:"


@dataclass(frozen=True)
class Holder:
    """Who holds a writer id's lease."""

    writer_id: str
    owner: str  # host:pid:token of the holding process
    host: str
    pid: int
    mode: str
    acquired_at: float  # epoch seconds
    heartbeat_at: float

    def describe(self, now: float) -> str:
        started = datetime.fromtimestamp(self.acquired_at, UTC).isoformat(timespec="seconds")
        return (f"process {self.pid} on host {self.host} ({self.mode} mode, started {started}, "
                f"last heartbeat {now - self.heartbeat_at:.0f}s ago)")


def engine_for(catalog: CatalogConfig) -> Engine:
    """A SQLAlchemy engine on the catalog's database (SQLite waits for locks instead of failing)."""
    from sqlalchemy import create_engine

    if catalog.uri.startswith("sqlite"):
        return create_engine(catalog.uri, connect_args={"timeout": 30})
    return create_engine(catalog.uri, pool_pre_ping=True)


def _table() -> Table:
    from sqlalchemy import Column, Float, Integer, MetaData, String, Table

    return Table(
        TABLE, MetaData(),
        Column("writer_id", String(255), primary_key=True),
        Column("owner", String(512), nullable=False),
        Column("host", String(255), nullable=False),
        Column("pid", Integer, nullable=False),
        Column("mode", String(32), nullable=False),
        Column("acquired_at", Float, nullable=False),
        Column("heartbeat_at", Float, nullable=False),
    )


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class WriterLease:
    """The lease of one writer id, held by this process once :meth:`acquire` returned.

    :param engine: the catalog database (``engine_for``)
    :param writer_id: the stream's writer id
    :param ttl: how long a silent holder keeps the lease (``writer_lease``)
    :param mode: the writer's mode, shown to a writer that is refused
    :param hint: what to do when refused (appended to the message)
    """

    def __init__(self, engine: Engine, writer_id: str, ttl: timedelta, mode: str, hint: str = "") -> None:
        self.engine = engine
        self.writer_id = writer_id
        self.ttl = ttl.total_seconds()
        self.mode = mode
        self.hint = hint
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:12]}"
        self.table = _table()
        self._renewed = 0.0

    def holder(self, conn: Connection | None = None) -> Holder | None:
        """The current holder (live or not), or None."""
        from sqlalchemy import select

        with contextlib.ExitStack() as stack:
            conn = conn or stack.enter_context(self.engine.connect())
            row = conn.execute(select(self.table).where(self.table.c.writer_id == self.writer_id)).mappings().first()
        return None if row is None else Holder(**dict(row))

    def live_holder(self) -> Holder | None:
        """The holder while its lease is live (not silent for longer than the lease, its process not gone), else
        None."""
        holder = self.holder()
        return None if holder is None or self._takeable(holder, time.time()) is not None else holder

    def check(self) -> None:
        """Raise :class:`WriterBusyError` when a live writer holds the lease (reads only: a writer refused this way
        has not started Spark, nor touched the catalog's tables)."""
        from sqlalchemy import inspect
        from sqlalchemy.exc import SQLAlchemyError

        try:
            holder = self.holder() if inspect(self.engine).has_table(TABLE) else None
        except SQLAlchemyError:  # the catalog is unreachable: taking the lease later waits for it and says so
            return
        now = time.time()
        if holder is not None and self._takeable(holder, now) is None:
            raise self._busy(holder, now)

    def _busy(self, holder: Holder, now: float) -> WriterBusyError:
        return WriterBusyError(
            f"writer {self.writer_id!r} is already running: {holder.describe(now)}. Two writers of one stream "
            f"would race for every batch, so this one does not start. {self.hint}".rstrip()
        )

    def _takeable(self, holder: Holder, now: float) -> str | None:
        """Why ``holder``'s lease may be taken over, or None while it is live."""
        if holder.owner == self.owner:
            return "held by this process"
        if now - holder.heartbeat_at > self.ttl:
            return f"its holder ({holder.describe(now)}) is silent for longer than writer_lease ({self.ttl:.0f}s)"
        if holder.host == self.host and _pid_gone(holder.pid):
            return f"its holder, process {holder.pid} on this host, is gone"
        return None

    def acquire(self) -> None:
        """Take the lease, or raise :class:`WriterBusyError` naming the live holder."""
        from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

        for attempt in range(1, 21):
            try:
                # two writers starting together may both create the table: the loser sees it on the next round
                self.table.create(self.engine, checkfirst=True)
                if self._try_acquire():
                    return
            except IntegrityError:
                pass  # another writer inserted the row (or created the table) first: read it again
            except (OperationalError, ProgrammingError) as exc:  # SQLite locked, a dropped connection, a table
                # created by another writer in between
                log.warning("writer %s: taking the lease failed (attempt %d): %s", self.writer_id, attempt,
                            str(exc).splitlines()[0])
                time.sleep(min(5.0, 0.2 * attempt))
        raise WriterBusyError(f"writer {self.writer_id!r}: could not take the lease (other writers kept taking it, "
                              "or the catalog database stayed locked)")

    def _try_acquire(self) -> bool:
        """One attempt: True when taken; raises WriterBusyError when a live holder has it."""
        from sqlalchemy import insert, update

        now = time.time()
        values = {"owner": self.owner, "host": self.host, "pid": self.pid, "mode": self.mode,
                  "acquired_at": now, "heartbeat_at": now}
        with self.engine.begin() as conn:
            holder = self.holder(conn)
            if holder is None:
                conn.execute(insert(self.table).values(writer_id=self.writer_id, **values))
                why: str | None = "no writer held it"
            else:
                why = self._takeable(holder, now)
                if why is None:
                    raise self._busy(holder, now)
                taken = conn.execute(
                    update(self.table)
                    .where(self.table.c.writer_id == self.writer_id, self.table.c.owner == holder.owner,
                           self.table.c.heartbeat_at == holder.heartbeat_at)
                    .values(**values)
                ).rowcount
                if taken != 1:
                    return False
        self._renewed = now
        log.info("writer %s: lease taken by %s (%s)", self.writer_id, self.owner, why)
        return True

    def renew(self) -> bool:
        """Heartbeat (at most every quarter of the lease). False when another process took the lease.

        A catalog that cannot be reached is logged and treated as still held: nobody else can take the
        lease through it either, and the commit fence guards the table."""
        from sqlalchemy import update

        now = time.time()
        if now - self._renewed < self.ttl / 4:
            return True
        try:
            with self.engine.begin() as conn:
                kept = conn.execute(
                    update(self.table)
                    .where(self.table.c.writer_id == self.writer_id, self.table.c.owner == self.owner)
                    .values(heartbeat_at=now)
                ).rowcount
                holder = None if kept else self.holder(conn)
        except Exception as exc:  # the catalog database is down or locked: try again on the next call
            log.warning("writer %s: lease heartbeat failed (catalog unreachable?): %s", self.writer_id,
                        str(exc).splitlines()[0])
            return True
        if kept:
            self._renewed = now
            return True
        log.error("writer %s: lease lost: now held by %s", self.writer_id,
                  holder.describe(now) if holder else "nobody (the lease row was removed)")
        return False

    def release(self) -> None:
        """Give the lease up (only if still held by this process)."""
        from sqlalchemy import delete

        try:
            with self.engine.begin() as conn:
                conn.execute(delete(self.table).where(self.table.c.writer_id == self.writer_id,
                                                      self.table.c.owner == self.owner))
        except Exception as exc:
            log.warning("writer %s: lease not released (it expires by itself): %s", self.writer_id, exc)


@contextlib.contextmanager
def heartbeat(leases: Callable[[], Iterable[WriterLease]], every: float = 1.0) -> Iterator[None]:
    """Renew ``leases()`` from a thread of its own while the caller's loop cannot: a writer's start that merges what
    the change log holds or waits for the catalog may take longer than ``writer_lease``, and without a heartbeat
    another writer would take over the streams of the application meanwhile. A lease lost all the same is found by
    the caller's own next :meth:`WriterLease.renew`."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            for lease in leases():
                lease.renew()

    thread = threading.Thread(target=beat, name="laketide-lease-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def live_redo(engine: Engine, writer_id: str, ttl: timedelta) -> str | None:
    """A description of the live redo holding ``writer_id``'s lease (see ``laketide.redo.job``), or None; None too
    when the lease table does not exist yet (no writer nor redo ever ran)."""
    try:
        holder = WriterLease(engine, writer_id, ttl, REDO_MODE).live_holder()
    except Exception:
        return None
    return None if holder is None or holder.mode != REDO_MODE else holder.describe(time.time())
