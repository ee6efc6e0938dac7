"""The writer lease (one live writer per stream) and the catalog retry loop, on a real SQLite database."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from laketide.errors import CatalogUnavailableError, WriterBusyError, WriterFencedError
from laketide.ingest.sink import is_transient, retrying
from laketide.lake.lease import WriterLease, engine_for
from tests.helpers import load, write_config


def lease(tmp_path: Path, ttl: float = 60, mode: str = "continuous") -> WriterLease:
    config = load(write_config(tmp_path))
    return WriterLease(engine_for(config.catalog), "clicks-writer", timedelta(seconds=ttl), mode, hint="Do X.")


def test_a_second_writer_is_refused_naming_the_first(tmp_path: Path) -> None:
    first = lease(tmp_path)
    first.acquire()
    second = lease(tmp_path, mode="incremental")
    with pytest.raises(WriterBusyError, match=r"already running: process \d+ on host .* \(continuous mode") as exc:
        second.acquire()
    assert "Do X." in str(exc.value)
    assert first.renew()


def test_a_silent_holder_is_taken_over_and_then_loses(tmp_path: Path) -> None:
    first = lease(tmp_path, ttl=0.5)
    first.acquire()
    time.sleep(0.8)  # no heartbeat for longer than the lease
    second = lease(tmp_path, ttl=0.5)
    second.acquire()
    first._renewed = 0  # renew now, not after a quarter of the lease
    assert not first.renew()  # the first one learns it lost the stream
    assert second.holder() is not None and second.holder().owner == second.owner  # type: ignore[union-attr]


def test_a_dead_holder_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    first = lease(tmp_path)
    first.pid = dead.pid  # as if that process had taken the lease and died
    first.acquire()
    second = lease(tmp_path)
    second.acquire()  # no wait for the lease to expire
    assert second.holder().owner == second.owner  # type: ignore[union-attr]


def test_release_lets_the_next_writer_start(tmp_path: Path) -> None:
    first = lease(tmp_path)
    first.acquire()
    first.release()
    lease(tmp_path).acquire()


def test_retrying_waits_out_transient_errors_and_gives_up_after_the_timeout() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("[SQLITE_BUSY_SNAPSHOT] database is locked")
        return "done"

    assert retrying("test", flaky, timedelta(seconds=30)) == "done"
    assert len(calls) == 3

    def down() -> None:
        raise RuntimeError("Connection refused")

    with pytest.raises(CatalogUnavailableError, match="stayed busy or unreachable"):
        retrying("test", down, timedelta(seconds=1))


def test_a_fence_or_a_bug_is_not_retried() -> None:
    assert not is_transient(WriterFencedError("moved on"))
    assert not is_transient(ValueError("a bug"))
    calls: list[int] = []

    def fenced() -> None:
        calls.append(1)
        raise WriterFencedError("moved on under this writer")

    with pytest.raises(WriterFencedError):
        retrying("test", fenced, timedelta(seconds=30))
    assert calls == [1]


def test_a_writer_computing_its_figures_keeps_its_leases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer application's loop renews its leases between the figures it computes every status interval.
    Figures that take longer than ``writer_lease`` (a busy catalog, a big landing zone, many streams) are not silence:
    the running streams' leases are renewed meanwhile, and a second writer of the stream is refused, not let take it
    over."""
    from laketide.ingest import backlog
    from laketide.ingest.group import Application

    config = load(write_config(tmp_path, writer_lease="5s"))
    stream = config.streams[0]
    app = Application(config, [stream], "continuous")
    (writer,) = app.writers
    writer.lease.acquire()
    writer.query = object()  # a running stream (no Spark here: the figures read the catalog and the landing zone)
    refused: list[str] = []

    def slow_freshness(catalog: object, s: object) -> None:
        time.sleep(stream.writer_lease.total_seconds() + 2)  # longer than the lease
        second = WriterLease(engine_for(config.catalog), stream.writer_id, stream.writer_lease, "incremental")
        with pytest.raises(WriterBusyError, match="already running"):
            second.acquire()
        refused.append(stream.name)
        raise RuntimeError("no figures: this test is about the lease")

    monkeypatch.setattr(backlog, "freshness", slow_freshness)
    app._figures()
    assert refused == [stream.name]
    assert writer.lease.renew()  # still the holder
    writer.lease.release()
