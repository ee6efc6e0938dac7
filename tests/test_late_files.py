"""The late-file rescue against a checkpoint log written as Spark writes it (no Spark): a file landed with a
modification time older than the file source's horizon is refreshed, once; a file the source took, however old,
is never touched (a ``chmod -R`` makes every file look newly landed); nothing happens before the source has taken
a file. The end-to-end case (the real writer ingests a 30-day-old file) is in ``tests/test_edges.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laketide.errors import ConfigError
from laketide.ingest import late_files
from laketide.ingest.landing import data_dir
from laketide.ingest.late_files import LateFiles, file_source_options
from laketide.lake.checkpoint_log import PRUNE_SUFFIX
from tests.helpers import load, write_config

DAY_MS = 86_400_000


def source_log(checkpoint: Path, batch: int, entries: list[tuple[Path, int]], compact: bool = False) -> None:
    folder = checkpoint / "sources" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    parents = {p.parent: p.parent.resolve() for p, _ in entries}  # resolved once per folder, not per file
    entry = [json.dumps({"path": (parents[p.parent] / p.name).as_uri(), "timestamp": ts, "batchId": batch})
             for p, ts in entries]
    lines = ["v1", *entry]
    (folder / (f"{batch}.compact" if compact else str(batch))).write_text("\n".join(lines))


def landed(folder: Path, name: str, mtime_ms: int) -> Path:
    path = folder / name
    path.write_text('{"a": 1}\n')
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return path


def test_only_files_the_source_would_skip_for_ever_are_refreshed(tmp_path: Path) -> None:
    stream = load(write_config(tmp_path, max_file_age="7d")).stream("clicks")
    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True)
    now = int(time.time() * 1000)
    late = LateFiles(stream)
    fresh = landed(folder, "20261122T03-p-00000001-0123abcd.jsonl", now - 60_000)
    assert late.rescue() == []  # the source has taken nothing: it skips nothing
    old_taken = landed(folder, "20261022T03-p-00000000-0123abcd.jsonl", now - 40 * DAY_MS)
    source_log(stream.checkpoint_path, 9, [(old_taken, now - 40 * DAY_MS)], compact=True)
    source_log(stream.checkpoint_path, 10, [(fresh, now - 60_000)])
    copied = landed(folder, "20261025T03-p-00000002-0123abcd.jsonl", now - 30 * DAY_MS)  # cp -p, after newer ones
    recent = landed(folder, "20261120T03-p-00000003-0123abcd.jsonl", now - 3 * DAY_MS)  # inside the horizon

    assert late.rescue() == [copied.name]
    assert abs(copied.stat().st_mtime_ns // 1_000_000 - now) < 60_000  # now: the next listing takes it
    assert old_taken.stat().st_mtime_ns // 1_000_000 == now - 40 * DAY_MS  # taken (in the log): never touched
    assert recent.stat().st_mtime_ns // 1_000_000 == now - 3 * DAY_MS  # Spark takes it as it is
    assert late.rescue() == []  # once

    # a chmod -R: every file's status changes (looks newly landed); the taken ones are found in the log
    time.sleep(0.01)
    for path in (old_taken, fresh, recent):
        os.chmod(path, 0o640)
    assert late.rescue() == []
    assert old_taken.stat().st_mtime_ns // 1_000_000 == now - 40 * DAY_MS


def test_an_unreadable_log_leaves_the_files_alone(tmp_path: Path) -> None:
    stream = load(write_config(tmp_path)).stream("clicks")
    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True)
    now = int(time.time() * 1000)
    copied = landed(folder, "20261025T03-p-00000002-0123abcd.jsonl", now - 30 * DAY_MS)
    (stream.checkpoint_path / "sources" / "0").mkdir(parents=True)
    (stream.checkpoint_path / "sources" / "0" / "0").write_text("v2\n{}")  # another Spark's format
    assert LateFiles(stream).rescue() == []
    assert copied.stat().st_mtime_ns // 1_000_000 == now - 30 * DAY_MS


def test_a_long_log_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """A compacted source log holds a line per file the stream ever read (173 MB after 300,000 files in
    ``bench/bench_seen_files.py``): the horizon and the rescue read it a line at a time, so the driver's memory does
    not grow with the files read (this 18 MB log read whole took 42 MB at the peak; a line at a time, 0.1 MB)."""
    import tracemalloc

    stream = load(write_config(tmp_path, max_file_age="7d")).stream("clicks")
    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True)
    now = int(time.time() * 1000)
    taken = [(folder / f"20261126T03-p-{i:08d}-0123abcd.jsonl", now - 60_000) for i in range(100_000)]
    source_log(stream.checkpoint_path, 99, taken, compact=True)
    assert (stream.checkpoint_path / "sources" / "0" / "99.compact").stat().st_size > 10_000_000
    copied = landed(folder, "20261025T03-p-00000002-0123abcd.jsonl", now - 30 * DAY_MS)  # cp -p: beyond the horizon
    late = LateFiles(stream)
    tracemalloc.start()
    try:
        rescued = late.rescue()  # the horizon reads the log, and so does the check of the candidate
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rescued == [copied.name]
    assert peak < 2_000_000, f"{peak:,} bytes at the peak"


def test_the_source_options_follow_the_configuration(tmp_path: Path) -> None:
    stream = load(write_config(tmp_path, max_file_age="30d")).stream("clicks")
    assert file_source_options(stream) == {"maxFileAge": f"{30 * DAY_MS}ms", "latestFirst": "false"}


def finished_batch(checkpoint: Path, batch: int, log_offset: int) -> None:
    """``offsets/<batch>`` and ``commits/<batch>`` as Spark writes them: the query finished ``batch``, whose file
    source offset is the log batch ``log_offset``."""
    for folder in ("offsets", "commits"):
        (checkpoint / folder).mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(
        f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{{}}}}\n{{"logOffset":{log_offset}}}')
    (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_log_keeps_the_entries_of_its_retention_and_older_files_are_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's file-source log keeps a line per file ever read; the writer rewrites the newest compacted log file
    without the entries older than ``source_log_retention`` behind the newest, except those of a batch the query
    has not finished. A file landing older than the retention is then ambiguous (new, or a copy of one read before):
    it is named and left, never touched: once by a writer, and again by every restarted writer while it is there
    (the checkpoint keeps it, with the time of the last look, so a restarted writer does not name the files it has
    read before)."""
    monkeypatch.setattr(late_files, "SLACK_MS", 200)  # the file system keeps nanoseconds: a shorter wait will do
    stream = load(write_config(tmp_path, max_file_age="7d", source_log_retention="20d")).stream("clicks")
    checkpoint = stream.checkpoint_path
    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True)
    now = int(time.time() * 1000)
    name = "20261122T03-p-{:08d}-0123abcd.jsonl".format
    read_50d = landed(folder, name(0), now - 50 * DAY_MS)
    read_30d = landed(folder, name(1), now - 30 * DAY_MS)
    read_10d = landed(folder, name(2), now - 10 * DAY_MS)
    newest = landed(folder, name(3), now - 60_000)
    unfinished = landed(folder, name(4), now - 25 * DAY_MS)  # in the batch not finished yet: kept, however old
    entries = [(read_50d, now - 50 * DAY_MS, 0), (read_30d, now - 30 * DAY_MS, 3), (read_10d, now - 10 * DAY_MS, 5),
               (newest, now - 60_000, 8), (unfinished, now - 25 * DAY_MS, 9)]
    logs = checkpoint / "sources" / "0"
    logs.mkdir(parents=True)
    lines = [json.dumps({"path": p.resolve().as_uri(), "timestamp": ts, "batchId": b}) for p, ts, b in entries]
    (logs / "9.compact").write_text("\n".join(["v1", *lines]))
    (logs / ".9.compact.crc").write_bytes(b"crc\x00stale")
    finished_batch(checkpoint, 41, 8)
    new_12d = landed(folder, name(5), now - 12 * DAY_MS)  # new, beyond max_file_age, within the retention
    time.sleep(late_files.SLACK_MS / 1000 + 0.1)  # what landed so far landed before the first look

    with caplog.at_level("INFO", logger="laketide.ingest.late_files"):
        assert LateFiles(stream).rescue() == [new_12d.name]  # checked against the whole log, then the log pruned
        kept = [lines[2], lines[3], lines[4]]
        assert (logs / "9.compact").read_text() == "\n".join(["v1", *kept])  # Spark's layout, entries verbatim
        assert not (logs / ".9.compact.crc").exists()
        assert "dropped 2 entries older than the retention" in caplog.text

        # the file read 30 days ago is copied back with its time (cp -p); the writer restarts twice
        os.utime(read_30d, ns=(now * 1_000_000, (now - 30 * DAY_MS) * 1_000_000))
        time.sleep(late_files.SLACK_MS / 1000 + 0.1)
        writer = LateFiles(stream)
        assert writer.rescue() == []
        assert writer.rescue() == []  # looked at already: not named again by this writer
        assert late_files.too_old_files(stream) == {read_30d.name: read_30d.stat().st_ctime_ns // 1_000_000}
        assert LateFiles(stream).rescue() == []  # a restarted writer names it again: it is still not ingested
    assert read_30d.stat().st_mtime_ns // 1_000_000 == now - 30 * DAY_MS  # left as it is
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "source_log_retention" in
              r.getMessage()]
    assert len(warned) == 2 and all(read_30d.name in w and f"touch {read_30d}" in w for w in warned), warned

    # a log with nothing to drop is not rewritten; a log of which no batch is finished is not pruned at all
    before = (logs / "9.compact").stat().st_mtime_ns
    LateFiles(stream).rescue()
    assert (logs / "9.compact").stat().st_mtime_ns == before
    shutil.rmtree(checkpoint / "commits")
    (logs / "19.compact").write_text("\n".join(["v1", lines[0], *kept]))
    LateFiles(stream).rescue()
    assert (logs / "19.compact").read_text() == "\n".join(["v1", lines[0], *kept])


def test_the_retention_is_no_shorter_than_what_the_source_remembers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"source_log_retention: 3d is shorter than max_file_age \(7d\)"):
        load(write_config(tmp_path, max_file_age="7d", source_log_retention="3d"))


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


PRUNE = """
import sys
from laketide.ingest.late_files import LateFiles
from tests.helpers import load
LateFiles(load(__import__("pathlib").Path(sys.argv[1])).stream("clicks")).rescue()
"""


def test_two_writers_pruning_at_once_and_one_killed_midway_leave_a_complete_log(tmp_path: Path) -> None:
    """A frozen writer resumed beside the one that overtook it prunes the same log file at the same time; a writer
    is killed while it rewrites it. The log is always either the old file or the pruned one, complete."""
    config_path = write_config(tmp_path, max_file_age="7d", source_log_retention="20d")
    stream = load(config_path).stream("clicks")
    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True)
    now = int(time.time() * 1000)
    old = [json.dumps({"path": (folder / f"20261022T03-p-{i:08d}-0123abcd.jsonl").as_uri(),
                       "timestamp": now - 40 * DAY_MS, "batchId": 1}) for i in range(80_000)]
    new = [json.dumps({"path": (folder / f"20261126T03-p-{i:08d}-0123abcd.jsonl").as_uri(),
                       "timestamp": now - 60_000, "batchId": 9}) for i in range(5_000)]
    whole = "\n".join(["v1", *new, *old])  # the entries kept first: the rewrite then reads for long after them
    logs = stream.checkpoint_path / "sources" / "0"
    logs.mkdir(parents=True)
    finished_batch(stream.checkpoint_path, 12, 9)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = [sys.executable, "-c", PRUNE, str(config_path)]

    # killed while it writes the new file, early and late: the old file is left, complete
    pruned_size = len("\n".join(["v1", *new]))
    for written in (0, pruned_size - 65_536):  # (less than a write buffer: the rest is written at the end)
        (logs / "9.compact").write_text(whole)
        for temp in logs.glob(f"*{PRUNE_SUFFIX}"):
            temp.unlink()
        proc = subprocess.Popen(run, env=env)
        deadline = time.monotonic() + 60
        while not any(size(t) > written for t in logs.glob(f"*{PRUNE_SUFFIX}")):
            assert proc.poll() is None and time.monotonic() < deadline, "the rewrite was not seen under way"
            time.sleep(0.002)
        proc.kill()
        proc.wait()
        assert (logs / "9.compact").read_text() == whole
        assert list(logs.glob(f".9.compact.*{PRUNE_SUFFIX}"))  # killed midway: its hidden file is left
    # two at once
    (logs / "9.compact").write_text(whole)
    procs = [subprocess.Popen(run, env=env) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert (logs / "9.compact").read_text() == "\n".join(["v1", *new])  # each dropped the same: no mixture
    assert sorted(p.name for p in logs.iterdir() if not p.name.endswith(PRUNE_SUFFIX)) == ["9.compact"]
