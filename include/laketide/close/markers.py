"""Done-markers: what consumers outside Airflow get when an hour closes, and again when it re-closes.

A stream's ``done_markers`` configuration (``laketide.config.markers``) names up to three actions; each gets the
same record, the close record (:class:`laketide.close.results.ClosedPartition`: stream, table, partition, rows,
rejects, duplicates removed, audit, snapshot id, closed at, whether it is a re-close):

* **file**: a ``_SUCCESS``-style JSON file at a path template, written atomically (a temporary file in the same
  folder, flushed to disk, then renamed over the marker): a reader sees the old marker or the new one, never half
  of one; a re-close overwrites it;
* **http**: a POST of the JSON, each attempt bounded by a timeout, failed attempts (unreachable, timeout, HTTP 5xx
  or 429) retried with a doubling back-off; another 4xx is not retried (the request itself is wrong);
* **callable**: ``package.module:function`` called with the record (a dict).

:func:`fire` runs every configured action (one failing does not stop the others) and raises
:class:`laketide.errors.DoneMarkerError` naming each failure. The close DAG runs it in a task of its own, after the
hour was recorded closed: a failure retries that task and finally alerts; the hour stays closed.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from laketide.close.results import ClosedPartition
from laketide.config import DoneMarkersConfig, HttpMarker, LaketideConfig, StreamConfig
from laketide.config.values import _local_path
from laketide.errors import DoneMarkerError
from laketide.lake.hours import parse_partition

log = logging.getLogger("laketide.close.markers")

#: HTTP statuses worth another attempt (the endpoint is there but cannot take the record now)
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class MarkerResult:
    """One action's outcome: ``action`` is ``file``, ``http`` or ``callable``; ``detail`` says what was done or why
    it failed."""

    action: str
    ok: bool
    detail: str


def marker_file(config: LaketideConfig, stream: StreamConfig, partition: str) -> Path:
    """The marker file of ``partition`` (a partition key) of ``stream``.

    :raises DoneMarkerError: the stream has no file marker, or its template needs a local warehouse
    """
    markers = stream.done_markers
    if markers is None or markers.file is None:
        raise DoneMarkerError(f"stream {stream.name!r} has no done_markers.file configured")
    try:
        return markers.path(_local_path(config.catalog.warehouse), stream.name, stream.table,
                            parse_partition(partition))
    except ValueError as exc:
        raise DoneMarkerError(f"streams[{stream.name}].done_markers.file: {exc}") from None


def payload(closed: ClosedPartition) -> bytes:
    """The record as the marker file and the POST body hold it: JSON, keys sorted, one trailing newline."""
    return (json.dumps(closed.to_dict(), sort_keys=True) + "\n").encode()


def write_marker(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, flushed to disk, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)


def post(http: HttpMarker, data: bytes, sleep: Callable[[float], None] = time.sleep) -> str:
    """POST ``data`` (JSON) to the configured URL, retrying as configured; what the endpoint answered.

    :raises DoneMarkerError: every attempt failed, or the endpoint refused the request (a 4xx other than 408, 425,
        429): the message names the URL, the attempts and the last error
    """
    headers = {"Content-Type": "application/json", "User-Agent": "laketide-done-markers", **http.headers}
    wait = http.backoff.total_seconds()
    last = ""
    for attempt in range(1, http.attempts + 1):
        request = urllib.request.Request(http.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=http.timeout.total_seconds()) as response:
                return f"POST {http.url}: HTTP {response.status} (attempt {attempt})"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code} {exc.reason}"
            if exc.code not in RETRY_STATUSES:
                raise DoneMarkerError(f"POST {http.url} was refused: {last} (not retried: fix the request or the "
                                      "endpoint)") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            last = f"unreachable ({reason})" if not isinstance(reason, TimeoutError) else "timed out"
        if attempt < http.attempts:
            log.warning("done-marker POST %s attempt %d of %d failed: %s; next attempt in %gs", http.url, attempt,
                        http.attempts, last, wait)
            sleep(wait)
            wait *= 2
    raise DoneMarkerError(f"POST {http.url} failed {http.attempts} time(s); last: {last}")


def load_callable(target: str) -> Callable[[dict[str, Any]], Any]:
    """The function ``package.module:function`` names.

    :raises DoneMarkerError: the module cannot be imported or has no such function
    """
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time error of the user's module
        raise DoneMarkerError(f"callable {target}: cannot import {module_name} ({type(exc).__name__}: {exc})"
                              ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise DoneMarkerError(f"callable {target}: {module_name} has no function {name!r}")
    return function


def _run(action: str, step: Callable[[], str]) -> MarkerResult:
    try:
        return MarkerResult(action, True, step())
    except DoneMarkerError as exc:
        return MarkerResult(action, False, str(exc))
    except Exception as exc:  # a user callable may raise anything; a disk may be full
        return MarkerResult(action, False, f"{type(exc).__name__}: {exc}")


def fire(config: LaketideConfig, stream: StreamConfig, closed: ClosedPartition,
         sleep: Callable[[float], None] = time.sleep) -> list[MarkerResult]:
    """Run every done-marker action of ``stream`` for ``closed``; their results (none when none is configured).

    :raises DoneMarkerError: one or more actions failed (the others ran): the message names each failure and says
        that the hour stays closed
    """
    markers: DoneMarkersConfig | None = stream.done_markers
    if markers is None:
        return []
    data = payload(closed)
    record = closed.to_dict()
    results: list[MarkerResult] = []
    if markers.file is not None:
        def write() -> str:
            path = marker_file(config, stream, closed.partition)
            write_marker(path, data)
            return f"wrote {path}"
        results.append(_run("file", write))
    if markers.http is not None:
        http = markers.http
        results.append(_run("http", lambda: post(http, data, sleep)))
    if markers.callable is not None:
        target = markers.callable

        def call() -> str:
            load_callable(target)(dict(record))
            return f"called {target}"
        results.append(_run("callable", call))
    what = f"{'re-close' if closed.reclose else 'close'} of {stream.name} {closed.partition}"
    for r in results:
        (log.info if r.ok else log.error)("done-marker %s of the %s: %s", r.action, what, r.detail)
    failed = [r for r in results if not r.ok]
    if failed:
        raise DoneMarkerError(
            f"{len(failed)} of {len(results)} done-marker action(s) of the {what} failed: "
            + "; ".join(f"{r.action}: {r.detail}" for r in failed)
            + ". The hour stays closed; the actions run again when the task is retried")
    return results
