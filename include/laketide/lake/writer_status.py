"""Each stream's writer, as its application last reported it: one row per stream in the catalog database (table
``laketide_writer_status``, beside the writer leases), so the UI, ``./laketide status`` and any host that reaches
the catalog read it.

A row holds the stream's writer group and application (host, pid), its state (``running``, ``waiting``,
``failed``, ``held out`` (its batch killed the application: the reason names its files and what to do, see
``laketide.ingest.failures``), ``stopped``, ``done``), why, when, and its freshness figures
(``laketide.ingest.backlog.Freshness``: landed -> committed p50/p95, lag, backlog) as JSON. The application writes
it on every change of state and with fresh figures every status interval; a row whose application stopped reporting
is older than a few intervals (the reader compares ``updated_at`` with the stream's lease).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Engine

log = logging.getLogger("laketide.lake.writer_status")
TABLE = "laketide_writer_status"
#: ``stopping``: asked to stop (SIGTERM, its stop file), the stream finishes the batch it is in
STATES = ("starting", "running", "stopping", "waiting", "failed", "held out", "stopped", "done")


@dataclass(frozen=True)
class WriterStatus:
    """One stream's writer, as last reported."""

    stream: str
    group: str
    state: str
    reason: str
    host: str
    pid: int
    updated_at: float  # epoch seconds
    figures: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"stream": self.stream, "group": self.group, "state": self.state, "reason": self.reason,
                "host": self.host, "pid": self.pid, "updated_at": self.updated_at, "figures": self.figures}


def _table() -> Table:
    from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

    return Table(
        TABLE, MetaData(),
        Column("stream", String(255), primary_key=True),
        Column("grp", String(255), nullable=False),
        Column("state", String(32), nullable=False),
        Column("reason", Text, nullable=False),
        Column("host", String(255), nullable=False),
        Column("pid", Integer, nullable=False),
        Column("updated_at", Float, nullable=False),
        Column("figures", Text, nullable=False),
    )


def report(engine: Engine, stream: str, group: str, state: str, reason: str = "",
           figures: dict[str, Any] | None = None) -> None:
    """Write (insert or replace) the row of ``stream``. A catalog that cannot be reached is logged, not raised: the
    report is a view of the writer, never a reason to stop it."""
    from sqlalchemy import delete, insert

    if state not in STATES:
        raise ValueError(f"unknown writer state {state!r}: one of {STATES}")
    table = _table()
    row = {"stream": stream, "grp": group, "state": state, "reason": reason[:4000], "host": socket.gethostname(),
           "pid": os.getpid(), "updated_at": time.time(), "figures": json.dumps(figures or {}, default=str)}
    try:
        table.create(engine, checkfirst=True)
        with engine.begin() as conn:
            conn.execute(delete(table).where(table.c.stream == stream))
            conn.execute(insert(table).values(**row))
    except Exception as exc:
        log.warning("stream %s: writer status not recorded (catalog unreachable?): %s", stream,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def read(engine: Engine) -> dict[str, WriterStatus]:
    """Every stream's last report, by stream (empty before any writer reported)."""
    from sqlalchemy import inspect, select

    table = _table()
    if not inspect(engine).has_table(TABLE):
        return {}
    with engine.connect() as conn:
        rows = conn.execute(select(table)).mappings().all()
    return {r["stream"]: WriterStatus(r["stream"], r["grp"], r["state"], r["reason"], r["host"], int(r["pid"]),
                                      float(r["updated_at"]), json.loads(r["figures"] or "{}")) for r in rows}
