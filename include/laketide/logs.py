"""Logging of laketide's processes: one format, and the libraries' noise silenced at its logger.

Stdlib only; imports nothing of laketide, so any stage may use it.

* py4j logs every command the JVM sends back at INFO ("Received command c on object id p0"): in a Spark job's
  log (the Airflow task log of a writer) that was half the lines;
* Great Expectations logs at INFO, while it is imported, each function it does not register ("Skipping
  registering function ... because it is a closure"): 213 of 230 lines of a verification's log.
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: loggers kept at WARNING whatever the root level
NOISY = ("py4j", "great_expectations._docs_decorators")


def quiet_libraries() -> None:
    """Raise the noisy libraries' loggers to WARNING (call before importing them: GX logs while it is imported)."""
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.WARNING)


def setup(level: int = logging.INFO) -> None:
    """The logging of a laketide command or Spark job: ``FORMAT`` at ``level``, the libraries quiet."""
    logging.basicConfig(level=level, format=FORMAT)
    quiet_libraries()
