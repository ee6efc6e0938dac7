"""Logging of laketide's processes: one format, and the libraries' noise silenced at its logger.

Stdlib only; imports nothing of laketide, so any stage may use it.

* py4j logs every command the JVM sends back at INFO ("Received command c on object id p0"): in a Spark job's
  log (the Airflow task log of a writer) that was half the lines;
* Great Expectations logs at INFO, while it is imported, each function it does not register ("Skipping
  registering function ... because it is a closure"): 213 of 230 lines of a verification's log.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator

#: ``%(stream)s``: ``[<stream>] `` in a line logged while a stream's micro-batch runs (see :func:`for_stream`), so
#: that the lines of a writer group's streams, which interleave, tell whose they are; empty elsewhere
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(stream)s%(message)s"
_STREAM: contextvars.ContextVar[str | None] = contextvars.ContextVar("laketide_stream", default=None)
#: loggers kept at WARNING whatever the root level
NOISY = ("py4j", "great_expectations._docs_decorators")


def quiet_libraries() -> None:
    """Raise the noisy libraries' loggers to WARNING (call before importing them: GX logs while it is imported)."""
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.WARNING)


@contextlib.contextmanager
def for_stream(name: str) -> Iterator[None]:
    """Lines logged inside (in this thread) name stream ``name``."""
    token = _STREAM.set(name)
    try:
        yield
    finally:
        _STREAM.reset(token)


class _StreamField(logging.Filter):
    """Gives each record the ``stream`` field of ``FORMAT``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "stream"):
            name = _STREAM.get()
            record.stream = f"[{name}] " if name else ""
        return True


def name_streams(handler: logging.Handler) -> logging.Handler:
    """``handler`` with the ``stream`` field of ``FORMAT`` (a handler formatting with ``FORMAT`` needs it)."""
    if not any(isinstance(f, _StreamField) for f in handler.filters):
        handler.addFilter(_StreamField())
    return handler


def setup(level: int = logging.INFO) -> None:
    """The logging of a laketide command or Spark job: ``FORMAT`` at ``level``, the libraries quiet."""
    logging.basicConfig(level=level, format=FORMAT)
    for handler in logging.getLogger().handlers:
        name_streams(handler)
    quiet_libraries()
