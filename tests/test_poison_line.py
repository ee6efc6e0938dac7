"""A 50 MB line among good lines and files, through the real writer process with Spark's default driver
memory: the good lines land, the long line is a reject with its reason and a truncated raw, nothing wedges."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from laketide.ingest import landing
from laketide.ingest.columns import RAW_PREFIX_CHARS
from laketide.lake.catalog import load_catalog
from tests.helpers import kill_group, load, start_writer, write_config, writer_log
from tests.test_writer import assert_exactly_once

pytestmark = pytest.mark.slow

BIG = 50 * 1024 * 1024
PARTITION = "2026-11-22T03:00:00+00:00"


def event(i: int) -> str:
    return json.dumps({"event_id": f"e{i:06d}", "event_time": f"2026-11-22T03:{i % 60:02d}:{i // 60 % 60:02d}Z",
                       "user_id": i, "page": "/home"})


def big_line(size: int) -> str:
    """A valid event padded to ``size`` bytes: only its length makes it a reject."""
    head = '{"event_id":"big","event_time":"2026-11-22T03:30:00Z","user_id":1,"page":"/'
    return head + "a" * (size - len(head) - 2) + '"}'


def land(config_path: Path, big: int | None) -> list[Path]:
    """Three files of good lines and one with good lines around a line of ``big`` bytes (or none), all in
    one micro-batch (max_files_per_trigger is 4)."""
    path = load(config_path).stream("clicks").landing_path
    files = [landing.publish(path, [event(300 * f + i) for i in range(300)], PARTITION, "poison", f, "clicks")
             for f in range(3)]
    mixed = [event(900 + i) for i in range(150)] + ([big_line(big)] if big else []) + \
        [event(1050 + i) for i in range(150)]
    files.append(landing.publish(path, mixed, PARTITION, "poison", 3, "clicks"))
    return files


def _session_peaks(sid: int, peaks: dict[str, int]) -> None:
    """Fold the peak RSS (VmHWM, kB) of each live process of session ``sid`` into ``peaks`` (by command)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[3]) != sid:
                continue
            status = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line)
        except (OSError, IndexError, ValueError):
            continue
        name = status.get("Name", "?").strip()
        hwm = int(status.get("VmHWM", "0 kB").split()[0])
        peaks[name] = max(peaks.get(name, 0), hwm)


@contextmanager
def peak_rss(sid: int) -> Iterator[dict[str, int]]:
    """Sample the peak RSS of the writer's processes (its own session) while the block runs."""
    peaks: dict[str, int] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            _session_peaks(sid, peaks)
            time.sleep(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peaks
    finally:
        done.set()
        thread.join()


def run_measured(config_path: Path, timeout: float = 600) -> tuple[int, dict[str, int]]:
    """Run the real writer (incremental) to its end; return its exit code and peak RSS per command (kB)."""
    proc = start_writer(config_path)
    with peak_rss(proc.pid) as peaks:
        try:
            code = proc.wait(timeout=timeout)
        except BaseException:
            kill_group(proc)
            raise
    return code, peaks


def test_a_50mb_line_is_isolated(tmp_path: Path, record_property) -> None:  # type: ignore[no-untyped-def]
    config_path = write_config(tmp_path)  # no spark.driver.memory: Spark's default (1g)
    files = land(config_path, BIG)
    code, peaks = run_measured(config_path)
    record_property("peak_rss_kb", peaks)
    print(f"peak RSS (kB) with a {BIG}-byte line: {peaks}")
    log = writer_log(config_path)
    assert code == 0, log[-5000:]
    assert "OutOfMemoryError" not in log
    # memory stays bounded: the Python driver never holds the line (its size is that of any batch), and the
    # JVM stays within its 1 GB heap plus its own overhead
    assert peaks.get("python", peaks.get("python3", 0)) < 400_000, peaks
    assert peaks.get("java", 0) < 1_700_000, peaks

    config = load(config_path)
    stream = config.stream("clicks")
    catalog = load_catalog(config.catalog)
    rejects = catalog.load_table(stream.rejects_table).scan().to_arrow().to_pylist()
    assert len(rejects) == 1
    (reject,) = rejects
    assert reject["reason"] == f"line of {BIG} bytes exceeds max_line_bytes ({stream.max_line_bytes})"
    assert reject["raw"] == big_line(BIG)[:RAW_PREFIX_CHARS] + f" ... [truncated: {BIG} bytes in the source file]"
    assert reject["source_file"] == files[-1].name
    # the full line stays in the landing file
    assert len(files[-1].read_bytes().split(b"\n")[150]) == BIG
    # every good line landed, once; lake + rejects == the audit records' counts
    assert assert_exactly_once(config_path) == {PARTITION: 1200}
