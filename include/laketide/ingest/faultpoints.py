"""The writer's fault-injection pause points, behind a zero-cost guard.

Production code never imports the development tools (:mod:`laketide.dev.faults`): ``LAKETIDE_FAULT`` is read
once, when this module is first imported (a writer process starts with it set or not). Unset, as in
production, :func:`maybe_pause` is a function that does nothing and no development module is loaded; set (a
fault-injection test starts the writer with it), it is :func:`laketide.dev.faults.maybe_pause`.

The writer calls ``maybe_pause("<point>", batch_id, stream)`` at each point of ``laketide.dev.faults.POINTS``.
"""

from __future__ import annotations

import os
from collections.abc import Callable


def _off(point: str, batch_id: int, stream: str = "") -> None:
    """No fault is armed in this process: nothing to do."""


def _guard() -> Callable[[str, int, str], None]:
    if not os.environ.get("LAKETIDE_FAULT"):
        return _off
    from laketide.dev import faults  # only a fault-injection run loads development code

    return faults.maybe_pause


#: ``maybe_pause(point, batch_id, stream)``: pause at ``point`` when a test armed it for ``batch_id`` (and
#: ``stream``), else nothing
maybe_pause: Callable[[str, int, str], None] = _guard()
#: a fault is armed in this process (``LAKETIDE_FAULT`` was set when it started)
ARMED = maybe_pause is not _off
