"""A busy catalog is a normal condition: a writer with a 1 s trigger and a live producer keep committing while
another process checks partitions and writes status records to the same SQLite catalog without pause."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from laketide.ingest.landing import data_dir
from laketide.lake.commits import read_checkpoint
from tests.helpers import config_env, kill_group, load, start_writer, write_config, writer_log
from tests.test_writer import assert_exactly_once

pytestmark = pytest.mark.slow

PRODUCE_SECONDS = 50
MAX_COMMIT_GAP = 30

# checks the current and the previous hour and records each state, about twice a second, until stopped
CHECKER = """
import sys, time
from datetime import UTC, datetime, timedelta
from laketide.config import get_config
from laketide.close.partitions import check_partition
from laketide.close.status import StatusRecord, record

config = get_config(); stream = config.stream("clicks")
done = 0
while True:
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    for partition in (hour - timedelta(hours=1), hour):
        status, _ = check_partition(config, stream, partition)
        record(config, StatusRecord("clicks", partition, status.state, rows=status.rows))
        done += 1
    print(done, flush=True)
    time.sleep(0.2)
"""


def test_writer_keeps_committing_while_the_catalog_is_busy(tmp_path: Path) -> None:
    config_path = write_config(tmp_path, trigger_interval="1s", max_files_per_trigger=20)
    env = config_env(config_path)
    writer = start_writer(config_path, mode="continuous")
    try:
        _run(tmp_path, config_path, env, writer)
    finally:
        if writer.poll() is None:
            kill_group(writer)
    assert_exactly_once(config_path)


def _run(tmp_path: Path, config_path: Path, env: dict[str, str], writer: subprocess.Popen[bytes]) -> None:
    checker = subprocess.Popen([sys.executable, "-c", CHECKER], env=env, stdout=subprocess.PIPE,
                               stderr=open(tmp_path / "checker.log", "wb"), start_new_session=True)  # noqa: SIM115
    producer = subprocess.run(
        [sys.executable, "-m", "laketide.dev.producer", "--mode", "live", "--rate", "200", "--flush-seconds", "1",
         "--duration", f"{PRODUCE_SECONDS}s", "--malformed-ratio", "0.02", "--seed", "8"],
        env=env, capture_output=True, timeout=PRODUCE_SECONDS + 120,
    )
    try:
        assert producer.returncode == 0, producer.stderr.decode()[-3000:]
        stream = load(config_path).stream("clicks")
        landed = len(list(data_dir(stream.landing_path).glob("*.jsonl")))
        assert landed > PRODUCE_SECONDS * 2 // 3  # a file a second, fewer on a loaded machine
        # the writer catches up with everything that landed, still the same process
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "pending" in _reconcile_state(config_path):
            assert writer.poll() is None, writer_log(config_path)[-5000:]
            time.sleep(2)
        assert checker.poll() is None, (tmp_path / "checker.log").read_text()[-3000:]
    finally:
        kill_group(checker)
    checks = int(checker.stdout.read().split()[-1]) if checker.stdout else 0  # type: ignore[union-attr]
    assert checks > 40, f"the checker made only {checks} checks: the catalog was not kept busy"
    (stream.checkpoint_path.parent / "clicks.stop").touch()
    assert writer.wait(timeout=180) == 0, writer_log(config_path)[-5000:]
    log = writer_log(config_path)
    assert "Traceback" not in log, log[-5000:]
    # the writer kept committing the whole time: many batches, and never a long silence between two of them
    # (a writer stuck on the catalog's lock would show a gap as long as its retries); batch sizes and so their
    # number depend on the machine's load, the gaps much less
    commits = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
               for line in log.splitlines() if "committed as snapshot" in line]
    assert len(commits) >= PRODUCE_SECONDS // 10, f"only {len(commits)} batches committed in {PRODUCE_SECONDS}s"
    longest = max((b - a).total_seconds() for a, b in itertools.pairwise(commits))
    assert longest <= MAX_COMMIT_GAP, f"the writer went {longest:.0f} s without a commit while the catalog was busy"
    assert read_checkpoint(stream.checkpoint_path).last_commit is not None


def _reconcile_state(config_path: Path) -> str:
    from laketide.close.reconcile import reconcile

    config = load(config_path)
    report = reconcile(config, config.stream("clicks"))
    return "pending" if report.pending_files else "done"
