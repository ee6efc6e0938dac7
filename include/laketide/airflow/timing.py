"""The time laketide's own work takes inside a task, logged at its end (``laketide work 1.23 s``): what is left of
the task's duration is Airflow's (the task process's start, the DAG file's parsing, the Task SDK's calls).
``bench/bench_close_range.py`` reads it from the task logs."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger(__name__)


def timed(func: Callable[P, R]) -> Callable[P, R]:
    """``func``, logging how long each call took (also when it raised)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            log.info("laketide work %.2f s (%s)", time.perf_counter() - started, func.__name__)

    return wrapper
