"""Lines above max_line_bytes: a 300 MB line in one stream of a two-stream writer group, through the real writer
process with a 512 MB driver heap (Spark's text source held such a line whole and ran the shared JVM out of memory
at every start), and the fragments Hadoop's line reader leaves of long lines that cross a split of their file, on
both commit paths: the other lines and streams land, each long line is one reject with its length and file, every
hour is exact."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from laketide.ingest import landing
from laketide.ingest.columns import RAW_PREFIX_CHARS
from laketide.lake.catalog import load_catalog
from tests.helpers import (
    ingest,
    kill_group,
    load,
    start_writer,
    unique_catalog,
    write_config,
    write_group_config,
    writer_log,
)
from tests.test_writer import assert_exactly_once

pytestmark = pytest.mark.slow

BIG = 300 * 1024 * 1024
PARTITION = "2026-11-22T03:00:00+00:00"


def event(i: int) -> str:
    return json.dumps({"event_id": f"e{i:06d}", "event_time": f"2026-11-22T03:{i % 60:02d}:{i // 60 % 60:02d}Z",
                       "user_id": i, "page": "/home"})


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


def sparse_big_file(path: Path, before: list[str], size: int, after: list[str]) -> bytes:
    """Rewrite the landed data file ``path`` as the lines ``before``, one line of ``size`` bytes (a valid event's
    start, a hole of NUL bytes, its end: written in three writes, stored sparse) and the lines ``after``; return
    the long line's start."""
    head = b'{"event_id":"big","event_time":"2026-11-22T03:30:00Z","user_id":1,"page":"/'
    with path.open("wb") as f:
        f.write(b"".join(line.encode() + b"\n" for line in before))
        start = f.tell()
        f.write(head)
        f.seek(start + size - 2)
        f.write(b'"}\n' + b"".join(line.encode() + b"\n" for line in after))
    return head


def test_a_300mb_line_in_one_stream_of_a_group(tmp_path: Path, record_property) -> None:  # type: ignore[no-untyped-def]
    config_path = write_group_config(tmp_path, ["a", "b"], "g")
    raw = yaml.safe_load(config_path.read_text())
    raw["spark"]["conf"]["spark.driver.memory"] = "512m"
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    config = load(config_path)
    for name in ("a", "b"):
        path = config.stream(name).landing_path
        for f in range(3):
            landing.publish(path, [event(300 * f + i) for i in range(300)], PARTITION, f"p-{name}", f, name)
    before, after = [event(900 + i) for i in range(150)], [event(1050 + i) for i in range(150)]
    poison = landing.publish(config.stream("b").landing_path, [*before, "placeholder", *after], PARTITION,
                             "p-b", 3, "b")
    head = sparse_big_file(poison, before, BIG, after)
    assert poison.stat().st_size > BIG and poison.stat().st_blocks * 512 < 10 * 1024 * 1024  # sparse

    proc = start_writer(config_path, group="g")
    with peak_rss(proc.pid) as peaks:
        try:
            code = proc.wait(timeout=600)
        except BaseException:
            kill_group(proc)
            raise
    record_property("peak_rss_kb", peaks)
    print(f"peak RSS (kB) with a {BIG}-byte line: {peaks}")
    log = writer_log(config_path)
    assert code == 0, log[-5000:]
    assert "OutOfMemoryError" not in log
    # the line is never held whole: not by the Python driver (its scan reads chunks), not by the JVM
    assert peaks.get("python", peaks.get("python3", 0)) < 400_000, peaks
    assert peaks.get("java", 0) < 1_300_000, peaks

    stream = config.stream("b")
    rejects = load_catalog(config.catalog).load_table(stream.rejects_table).scan().to_arrow().to_pylist()
    assert len(rejects) == 1
    (reject,) = rejects
    assert reject["reason"] == f"line of {BIG} bytes exceeds max_line_bytes ({stream.max_line_bytes})"
    assert reject["raw"] == (head.decode() + "\0" * (RAW_PREFIX_CHARS - len(head))
                             + f" ... [truncated: {BIG} bytes in the source file]")
    assert reject["source_file"] == poison.name
    assert reject["event_hour"] is not None
    # every good line of both streams landed, once; lake + rejects == the audit records' counts
    assert assert_exactly_once(config_path, "a") == {PARTITION: 900}
    assert assert_exactly_once(config_path, "b") == {PARTITION: 1200}


def long_line(i: int, size: int) -> str:
    """A line of ``size`` bytes (a JSON object of no stream's fields)."""
    start = f'{{"event_id":"long{i}","page":"/'
    return start + "x" * (size - len(start) - 2) + '"}'


@pytest.mark.parametrize("commit_path", ["internal", "public"])
def test_long_lines_across_splits(spark: Any, tmp_path: Path, commit_path: str) -> None:
    """Lines just above, and far above, max_line_bytes in files Spark splits (a small maxPartitionBytes): the
    reader skips the long ones and leaves fragments where they cross a split; each long line is one reject, the
    lines at the limit are valid, a file of long lines only is counted too, and one of which the reader gives the
    batch no row at all."""
    limit = 400
    config_path = write_config(tmp_path, catalog_name=unique_catalog(f"long_{commit_path}"), max_line_bytes=limit,
                               commit_path=commit_path, max_files_per_trigger=10)
    stream = load(config_path).stream("clicks")
    path = stream.landing_path
    at_limit = json.dumps({"event_id": "edge", "event_time": "2026-11-22T03:01:00Z", "user_id": 7,
                           "page": "/"}).replace('"/"', '"/' + "y" * 200 + '"')
    at_limit = at_limit[:-2] + "y" * (limit - len(at_limit)) + at_limit[-2:]
    assert len(at_limit) == limit
    sizes = [limit + 1, limit + 2, limit + 3, 3000, 9000]
    mixed = [event(i) for i in range(20)] + [long_line(i, n) for i, n in enumerate(sizes)] + [at_limit] + \
        [event(20 + i) for i in range(20)]
    files = [landing.publish(path, mixed, PARTITION, "long", 0, "clicks"),
             landing.publish(path, [long_line(9, 7000), long_line(10, 5000)], PARTITION, "long", 1, "clicks"),
             landing.publish(path, [event(100 + i) for i in range(30)], PARTITION, "long", 2, "clicks")]
    # a file of one long line in one split: the reader gives the batch no row of it, the plan names it
    files.append(landing.publish(path, [long_line(11, 1500)], PARTITION, "long", 3, "clicks"))
    spark.conf.set("spark.sql.files.maxPartitionBytes", "2048")
    try:
        ingest(spark, config_path)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    rejects = load_catalog(load(config_path).catalog).load_table(stream.rejects_table).scan().to_arrow().to_pylist()
    got = sorted((r["source_file"], r["reason"]) for r in rejects)
    reason = "line of {} bytes exceeds max_line_bytes (400)"
    assert got == sorted([*[(files[0].name, reason.format(n)) for n in sizes],
                          (files[1].name, reason.format(7000)), (files[1].name, reason.format(5000)),
                          *[(f.name, reason.format(1500)) for f in files[3:]]])
    assert all(r["raw"].endswith(" bytes in the source file]") for r in rejects)
    assert assert_exactly_once(config_path) == {PARTITION: 71}
