"""Test-only pause points for fault injection (off unless ``LAKETIDE_FAULT`` is set).

``LAKETIDE_FAULT=<point>:<batch id>[:<stream>]`` and ``LAKETIDE_FAULT_DIR=<folder>`` make the writer create
``<folder>/<point>-<batch>.reached`` when it gets there (in the stream named, when one is: a writer application
runs several) and then sleep, so a test can SIGKILL the real
process at that exact place. With ``LAKETIDE_FAULT_MODE=hold`` the writer waits there instead until the test
creates ``<folder>/<point>-<batch>.release``, then goes on (a test can freeze it with SIGSTOP meanwhile and
let a second writer overtake it). Points, in the order a batch passes them:

* ``batch_start``: a new micro-batch began (the previous one is committed in Iceberg and in the checkpoint)
* ``before_commit``: pre-commit done (the batch's data files are written, in no snapshot yet),
  nothing of the batch is committed yet. On the public commit path: the rejects are written to their
  staging branch (or, for a batch without rejects, the batch is cached and aggregated), nothing is on
  ``main`` yet
* ``between_tables``: the rejects are committed, the events are not published
* ``after_commit``: both Iceberg commits are done, Spark has not yet recorded the batch as committed

and, outside the writer, ``archive_audits`` (batch 0): an archive sweep (``laketide.close.archive``) has moved
its data files into the archive, not yet their audit records; ``backfill_read`` (batch 0): a backfill has fixed the
paths of the landing files it re-reads and read none of them yet.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

POINTS = ("batch_start", "before_commit", "between_tables", "after_commit",
          # an upsert stream's merge (laketide.ingest.merge_sink), after the change log's commit
          "before_tombstones", "before_merge", "after_merge",
          # the merge on a staging branch (a big merged table): its writes on the branch done, main not moved yet
          "merge_staged",
          # an archive sweep of closed hours' landing files (laketide.close.archive), between its two renames
          "archive_audits",
          # a backfill (laketide.redo.backfill) has fixed the paths of the files it re-reads, read none yet
          "backfill_read")


def armed(point: str, batch_id: int, stream: str = "") -> str | None:
    """The fault folder when ``point`` is armed for ``batch_id`` (and ``stream``), else None."""
    spec = os.environ.get("LAKETIDE_FAULT", "")
    folder = os.environ.get("LAKETIDE_FAULT_DIR")
    if not spec or not folder:
        return None
    want_point, _, rest = spec.partition(":")
    want_batch, _, want_stream = rest.partition(":")
    if want_point != point or (want_batch and int(want_batch) != batch_id):
        return None
    if want_stream and want_stream != stream:
        return None
    return folder


def pause_forever(folder: str, point: str, batch_id: int) -> None:
    """Announce the point, then sleep until killed (or until the parent process is gone)."""
    marker = Path(folder) / f"{point}-{batch_id}.reached"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(os.getpid()))
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


def hold(folder: str, point: str, batch_id: int) -> None:
    """Announce the point, then wait until the test releases it."""
    marker = Path(folder) / f"{point}-{batch_id}.reached"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(os.getpid()))
    release = marker.with_suffix(".release")
    while not release.exists():
        time.sleep(0.2)


def maybe_pause(point: str, batch_id: int, stream: str = "") -> None:
    folder = armed(point, batch_id, stream)
    if folder is None:
        return
    if os.environ.get("LAKETIDE_FAULT_MODE") == "hold":
        hold(folder, point, batch_id)
    else:
        pause_forever(folder, point, batch_id)
