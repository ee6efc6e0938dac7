"""A writer's checkpoint that lost part of its state, with real catalogs and the real writer application: a restart
is refused (the stream named, what is missing, the redo that recovers) or goes on exactly; a batch is never
skipped as "already committed" with files its commit did not record; landing files that arrive after the damage
are never lost. The tests of this module share one lake and run in order:

* ``offsets/`` deleted, the newest two ``commits/`` entries deleted, ``sources/`` deleted: each refused, the table
  unchanged; the checkpoint put back, the writer ingests the files landed meanwhile exactly once;
* a legal replay (``commits/`` one behind the table) is skipped; the same replay whose file-source log names other
  files (a renumbered checkpoint that passes the start-up check) stops the stream in the sink, naming the file;
* a two-stream group, one stream's ``offsets/`` deleted: that stream is refused, the other ingests exactly;
* the checkpoint ``rm -rf``'d under a running writer process (continuous), the process killed: the restart is
  refused; the redo to the table's current snapshot that the message names recovers every row exactly.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laketide.errors import CheckpointMismatchError
from laketide.ingest.landing import data_dir
from laketide.lake import checkpoint_log
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import checkpoint_problems, read_checkpoint, table_marker
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
from tests.test_writer import assert_exactly_once, produce

pytestmark = pytest.mark.slow

START = "2026-11-22T03:00:00+00:00"


def land(config_path: Path, hour: str, seed: int, name: str = "clicks", files: int = 1) -> None:
    """``files`` files of 10 events of one hour into stream ``name``'s landing zone (a few malformed lines)."""
    produce(config_path, "--stream", name, "--landing-path", str(config_path.parent / "landing" / name),
            "--producer-id", f"p-{name}-{seed}", "--start", hour, "--hours", "1", "--events-per-hour",
            str(10 * files), "--events-per-file", "10", "--malformed-ratio", "0.05", "--seed", str(seed))


def heads(config_path: Path, name: str = "clicks") -> tuple[str, str]:
    config = load(config_path)
    stream, catalog = config.stream(name), load_catalog(config.catalog)
    return (catalog.load_table(stream.table).metadata_location,
            catalog.load_table(stream.rejects_table).metadata_location)


def current_snapshot(config_path: Path, name: str = "clicks") -> int:
    config = load(config_path)
    sid = load_catalog(config.catalog).load_table(config.stream(name).table).metadata.current_snapshot_id
    assert sid is not None
    return sid


def checkpoint(config_path: Path, name: str = "clicks") -> Path:
    return load(config_path).stream(name).checkpoint_path


def unrecord(ckpt: Path, batch: int) -> None:
    """Spark's record that ``batch`` finished removed (with its checksum file)."""
    for name in (str(batch), f".{batch}.crc"):
        (ckpt / "commits" / name).unlink(missing_ok=True)


def wait_for_new_log(config_path: Path, text: str, offset: int, proc: subprocess.Popen[bytes]) -> None:
    """Wait until the writer's log holds ``text`` after its first ``offset`` characters."""
    deadline = time.monotonic() + 240
    while text not in writer_log(config_path)[offset:]:
        assert proc.poll() is None, writer_log(config_path)[-4000:]
        assert time.monotonic() < deadline, f"timed out waiting for {text!r}"
        time.sleep(0.3)


def put_back(good: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(good, target)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("damage")
    yield write_config(home, catalog_name=unique_catalog("damage"), max_files_per_trigger=1, live=False,
                       trigger_interval="1s")


def test_a_checkpoint_missing_a_log_is_refused_and_nothing_is_lost(spark: Any, lake: Path) -> None:
    land(lake, START, seed=1, files=3)  # batches 0, 1, 2
    ingest(spark, lake)
    assert_exactly_once(lake)
    ckpt = checkpoint(lake)
    good = lake.parent / "good-checkpoint"
    shutil.copytree(ckpt, good)
    state = read_checkpoint(ckpt)
    assert state.last_commit is not None and state.last_commit >= 2
    land(lake, "2026-11-22T04:00:00+00:00", seed=2)  # files that land after the damage
    current = current_snapshot(lake)
    before = heads(lake)
    damages = {
        "offsets/ (the batches Spark planned) is missing or empty": lambda: shutil.rmtree(ckpt / "offsets"),
        f"commits/ (the batches Spark finished) ends at batch {state.last_commit - 2}": lambda: [
            (ckpt / "commits" / name).unlink(missing_ok=True) for b in state.commits[-2:]
            for name in (str(b), f".{b}.crc")],
        "sources/0/ (the file source's log of the files it has taken) is missing or empty":
            lambda: shutil.rmtree(ckpt / "sources"),
    }
    for why, damage in damages.items():
        damage()
        with pytest.raises(CheckpointMismatchError) as err:
            ingest(spark, lake)
        text = str(err.value)
        assert why in text, text
        assert "refusing to start writer 'clicks-writer' of stream 'clicks'" in text
        assert f"./laketide redo --stream clicks --snapshot-id {current} --apply" in text
        assert heads(lake) == before, why  # nothing written
        put_back(good, ckpt)
    ingest(spark, lake)  # the checkpoint as it was: the files landed meanwhile are ingested, once
    assert_exactly_once(lake)


def test_a_replay_is_skipped_only_with_the_files_its_commit_recorded(spark: Any, lake: Path) -> None:
    ckpt = checkpoint(lake)
    good = lake.parent / "good-checkpoint"
    put_back(ckpt, good)
    state = read_checkpoint(ckpt)
    last = state.last_commit
    assert last is not None
    # Spark did not record the last batch (killed after the Iceberg commit): replayed with its files and skipped
    unrecord(ckpt, last)
    before = heads(lake)
    ingest(spark, lake)
    assert heads(lake) == before
    assert f"batch {last} already committed to lake.clicks by clicks-writer: skipped" in writer_log(lake)
    assert read_checkpoint(ckpt).last_commit == last
    # the same replay, but the file source's log batch of that batch names a new landing file: a renumbered
    # checkpoint that the start-up check cannot tell. The sink refuses instead of skipping the file
    unrecord(ckpt, last)
    land(lake, "2026-11-22T05:00:00+00:00", seed=3)
    new = sorted(data_dir(load(lake).stream("clicks").landing_path).glob("*p-clicks-3*.jsonl"))[0]
    log_batch = checkpoint_log.log_offset(ckpt, last)
    assert log_batch is not None
    entry = {"path": new.resolve().as_uri(), "timestamp": new.stat().st_mtime_ns // 1_000_000, "batchId": log_batch}
    source = checkpoint_log.source_log(ckpt)
    (source / f".{log_batch}.crc").unlink(missing_ok=True)
    (source / str(log_batch)).write_text(f"{checkpoint_log.VERSION}\n{json.dumps(entry)}")
    offset = len(writer_log(lake))
    with pytest.raises(CheckpointMismatchError) as err:
        ingest(spark, lake)
    text = str(err.value)
    assert f"stream 'clicks', batch {last} of table lake.clicks" in text, text
    assert "recorded other landing files than this batch holds" in text and new.name in text, text
    assert f"./laketide redo --stream clicks --snapshot-id {current_snapshot(lake)} --apply" in text
    assert heads(lake) == before
    assert "skipped" not in writer_log(lake)[offset:]
    put_back(good, ckpt)
    ingest(spark, lake)
    assert_exactly_once(lake)


def test_in_a_group_the_damaged_stream_is_refused_and_the_other_goes_on(spark: Any,
                                                                         tmp_path: Path) -> None:
    path = write_group_config(tmp_path, ["a", "b"], "g", catalog_name=unique_catalog("damage_group"),
                              max_files_per_trigger=2, live=False)
    for i, name in enumerate(("a", "b")):
        land(path, START, seed=10 + i, name=name, files=2)
    ingest(spark, path, group="g")
    for i, name in enumerate(("a", "b")):
        land(path, "2026-11-22T04:00:00+00:00", seed=20 + i, name=name)
    shutil.rmtree(checkpoint(path, "a") / "offsets")
    before = heads(path, "a")
    with pytest.raises(CheckpointMismatchError) as err:
        ingest(spark, path, group="g")
    text = str(err.value)
    assert "refusing to start writer 'a-writer' of stream 'a'" in text and "offsets/" in text, text
    assert f"./laketide redo --stream a --snapshot-id {current_snapshot(path, 'a')} --apply" in text
    assert heads(path, "a") == before
    assert_exactly_once(path, "b")  # both hours of b, the one landed after the damage too


def test_a_checkpoint_removed_under_a_running_writer_is_refused_and_a_redo_recovers(spark: Any, lake: Path) -> None:
    ckpt = checkpoint(lake)
    offset = len(writer_log(lake))
    proc = start_writer(lake, mode="continuous")
    try:
        land(lake, "2026-11-22T06:00:00+00:00", seed=4)
        wait_for_new_log(lake, "committed as snapshot", offset, proc)
        shutil.rmtree(ckpt, ignore_errors=True)  # while the writer runs: Spark may write parts of it again
        land(lake, "2026-11-22T07:00:00+00:00", seed=5)
        time.sleep(5)
    finally:
        kill_group(proc)
    # the restart (the writer application, here on this process's session): refused, naming what is missing and
    # the redo that recovers; nothing written
    before = heads(lake)
    with pytest.raises(CheckpointMismatchError) as err:
        ingest(spark, lake)
    current = current_snapshot(lake)
    assert f"./laketide redo --stream clicks --snapshot-id {current} --apply" in str(err.value), str(err.value)
    assert heads(lake) == before
    # that command triggers the laketide_redo DAG, which runs this job with the same stream and snapshot
    from laketide.redo.job import run
    from laketide.redo.params import validate

    config = load(lake)
    result = run(config, spark, validate(config, "clicks", str(current), dry_run=False, run_id="damaged-1"))
    assert result.hours, result.report
    assert_exactly_once(lake)  # every file, those read by the writer after the checkpoint was removed too
    marker = table_marker(load_catalog(config.catalog), "lake.clicks", "clicks-writer")
    state = read_checkpoint(ckpt)
    assert marker is not None and state.last_commit == marker.batch_id == state.last_offset
    assert checkpoint_problems(state, marker.batch_id) == []
