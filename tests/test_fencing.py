"""Zombie writers and busy catalogs, with real processes on a real SQLite file and a real PostgreSQL server.

* a writer frozen (SIGSTOP) after its pre-commit, overtaken by a second writer on the same checkpoint, then
  resumed (SIGCONT): it must not commit its batch again;
* two writers started together: one runs, the other refuses, naming it;
* the fence itself, deterministically: a commit whose starting marker is stale fails and changes nothing;
* a PostgreSQL catalog stopped for 30 s under a running writer: the writer waits and goes on, exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from laketide.ingest.landing import data_dir
from laketide.lake.commits import read_checkpoint
from tests.helpers import exit_code, freeze, kill_group, load, start_writer, wait_for, wait_lease_silent
from tests.pg import PgCluster
from tests.test_writer import assert_exactly_once, landed

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_uri(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for the default SQLite catalog, or the URI of a database on a throwaway PostgreSQL server."""
    if request.param == "sqlite":
        yield None
        return
    cluster = PgCluster()
    cluster.start()
    try:
        yield cluster.createdb("catalog")
    finally:
        cluster.destroy()


def use_catalog(config_path: Path, uri: str | None, **catalog: str) -> Path:
    raw = yaml.safe_load(config_path.read_text())
    if uri:
        raw["catalog"]["uri"] = uri
    raw["catalog"].update(catalog)
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return config_path


def signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    os.killpg(proc.pid, signum)


def wait_committed(config_path: Path, batch: int, proc: subprocess.Popen[bytes], log: Path,
                   timeout: float = 300) -> None:
    """Wait until Spark recorded ``batch`` as finished in the shared checkpoint."""
    checkpoint = load(config_path).stream("clicks").checkpoint_path
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_checkpoint(checkpoint)
        if state.last_commit is not None and state.last_commit >= batch:
            return
        assert proc.poll() is None, log.read_text(errors="replace")[-5000:]
        time.sleep(0.5)
    raise AssertionError(f"batch {batch} not committed in {timeout}s:\n{log.read_text(errors='replace')[-5000:]}")


def stop_writer(config_path: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    (load(config_path).stream("clicks").checkpoint_path.parent / "clicks.stop").touch()
    try:
        code = proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise
    assert code == 0, log.read_text(errors="replace")[-5000:]


def test_frozen_writer_overtaken_then_resumed_commits_nothing_on_postgresql(tmp_path: Path) -> None:
    """On SQLite: the public commit path below, and a writer application of three streams (tests/test_group.py)."""
    cluster = PgCluster()
    cluster.start()
    try:
        frozen_writer_overtaken(tmp_path, cluster.createdb("catalog"), "internal")
    finally:
        cluster.destroy()


def test_frozen_writer_overtaken_then_resumed_commits_nothing_on_the_public_path(tmp_path: Path) -> None:
    frozen_writer_overtaken(tmp_path, None, "public")


def frozen_writer_overtaken(tmp_path: Path, catalog_uri: str | None, commit_path: str) -> None:
    config_path = use_catalog(landed(tmp_path, max_files_per_trigger=5, trigger_interval="1s", writer_lease="5s",
                                     commit_path=commit_path), catalog_uri)
    faults = tmp_path / "faults"
    log_a, log_b, log_c = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.log"
    a = start_writer(config_path, mode="continuous", log=log_a, LAKETIDE_FAULT="before_commit:1",
                     LAKETIDE_FAULT_MODE="hold", LAKETIDE_FAULT_DIR=str(faults))
    b = None
    try:
        wait_for(faults / "before_commit-1.reached", a)  # batch 1's data files are written, nothing committed
        freeze(a, config_path)

        # while A's lease is fresh, a second writer refuses at once and names A
        busy = start_writer(config_path, mode="continuous", log=log_c)
        assert exit_code(busy, log_c) == 4, log_c.read_text(errors="replace")[-3000:]
        assert f"process {a.pid} on host" in log_c.read_text(errors="replace")
        assert "is already running" in log_c.read_text(errors="replace")

        wait_lease_silent(config_path)  # A stays frozen past its lease: B takes the stream over
        b = start_writer(config_path, mode="continuous", log=log_b)
        wait_committed(config_path, 3, b, log_b)
        assert "silent for longer than writer_lease" in log_b.read_text(errors="replace")

        (faults / "before_commit-1.release").touch()
        signal_group(a, signal.SIGCONT)  # A wakes up holding batch 1's written files
        assert a.wait(timeout=120) == 5, log_a.read_text(errors="replace")[-5000:]
        text = log_a.read_text(errors="replace")
        assert "moved on under this writer" in text or "lost its lease" in text, text[-5000:]
        assert "batch 1 committed" not in text

        assert b.poll() is None, log_b.read_text(errors="replace")[-5000:]  # the stream goes on with B
        stop_writer(config_path, b, log_b)
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                signal_group(proc, signal.SIGCONT)
                kill_group(proc)
    assert_exactly_once(config_path)


def test_two_writers_started_together_one_runs(tmp_path: Path, catalog_uri: str | None) -> None:
    config_path = use_catalog(landed(tmp_path, max_files_per_trigger=8, trigger_interval="1s"), catalog_uri)
    logs = [tmp_path / "one.log", tmp_path / "two.log"]
    procs = [start_writer(config_path, mode="continuous", log=log) for log in logs]
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.2)
        refused = [i for i, p in enumerate(procs) if p.poll() is not None]
        assert len(refused) == 1, [log.read_text(errors="replace")[-2000:] for log in logs]
        loser, winner = refused[0], 1 - refused[0]
        assert procs[loser].returncode == 4, logs[loser].read_text(errors="replace")[-3000:]
        assert f"process {procs[winner].pid} on host" in logs[loser].read_text(errors="replace")
        wait_committed(config_path, 2, procs[winner], logs[winner])
        stop_writer(config_path, procs[winner], logs[winner])
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_group(proc)
    assert_exactly_once(config_path)


def test_catalog_server_stopped_for_30s_under_a_running_writer(tmp_path: Path) -> None:
    cluster = PgCluster()
    cluster.start()
    try:
        uri = cluster.createdb("catalog")
        config_path = use_catalog(landed(tmp_path, max_files_per_trigger=2, trigger_interval="1s"), uri)
        log = tmp_path / "writer.log"
        proc = start_writer(config_path, mode="continuous", log=log)
        try:
            wait_committed(config_path, 1, proc, log)
            cluster.stop()
            time.sleep(30)
            assert proc.poll() is None, log.read_text(errors="replace")[-5000:]
            cluster.start()
            stream = load(config_path).stream("clicks")
            before = read_checkpoint(stream.checkpoint_path).last_commit or 0
            wait_committed(config_path, before + 3, proc, log)
            files = len(list(data_dir(stream.landing_path).glob("*.jsonl")))
            wait_committed(config_path, -(-files // 2) - 1, proc, log)  # all of them (2 a batch) before the stop
            stop_writer(config_path, proc, log)
        finally:
            if proc.poll() is None:
                kill_group(proc)
        text = log.read_text(errors="replace")
        assert "catalog busy or unreachable (attempt" in text, text[-5000:]
        assert "Traceback" not in text, text[-5000:]
        assert_exactly_once(config_path)
    finally:
        cluster.destroy()


def test_a_commit_from_a_stale_marker_is_fenced_and_changes_nothing(spark: object, tmp_path: Path) -> None:
    from laketide.errors import WriterFencedError
    from laketide.ingest import sink
    from laketide.ingest.tables import ensure_tables
    from laketide.ingest.writer import BatchWriter
    from laketide.lake.commits import summary_properties
    from laketide.lake.spark import use_catalog
    from tests.helpers import write_config

    # a catalog of its own, in the test process's one session (Spark keeps a catalog it has loaded under its name)
    config = load(write_config(tmp_path, catalog_name="fence", table="fence.events", rejects_table="fence.rejects"))
    use_catalog(spark, config)  # type: ignore[arg-type]
    stream = config.stream("clicks")
    ensure_tables(spark, config, stream)  # type: ignore[arg-type]
    writer = BatchWriter(config, stream)
    iceberg = writer.iceberg(spark)  # type: ignore[arg-type]

    def table() -> object:
        return iceberg.table("fence.fence.events")

    def props(batch: int) -> dict[str, str]:
        return summary_properties(stream.writer_id, batch, [], {})

    writer._publish(table(), [], props(0), 0, None)
    before_1 = sink.table_marker(table(), stream.writer_id)
    assert before_1 is not None and before_1.batch_id == 0
    writer._publish(table(), [], props(1), 1, before_1)  # the replacement commits batch 1

    stale = table()
    snapshots = stale.snapshots().size()  # type: ignore[attr-defined]
    with pytest.raises(WriterFencedError, match="moved on under this writer"):
        writer._publish(stale, [], props(1), 1, before_1)  # the zombie's batch 1, started from batch 0
    assert table().snapshots().size() == snapshots  # type: ignore[attr-defined]

    # another committer's snapshot (a compaction, an expiry) is built upon, not fenced
    foreign = table()
    foreign.newFastAppend().set("laketide.maintenance", "test").commit()  # type: ignore[attr-defined]
    before_2 = sink.table_marker(table(), stream.writer_id)
    assert before_2 is not None and before_2.batch_id == 1
    writer._publish(table(), [], props(2), 2, before_2)
    marker = sink.table_marker(table(), stream.writer_id)
    assert marker is not None and marker.batch_id == 2


def test_a_public_commit_from_a_stale_marker_is_fenced_and_changes_nothing(spark: object, tmp_path: Path) -> None:
    """The public path's fence, deterministically: a stale start fails before staging; a commit of the same
    batch by another writer between the staging write and the fast-forward fails the fast-forward (Iceberg
    does not rebase a reference update), and the retry is fenced; any other commit there is built upon."""
    from laketide.errors import WriterFencedError
    from laketide.ingest import public_sink
    from laketide.ingest.tables import ensure_tables
    from laketide.lake.commits import summary_properties
    from laketide.lake.spark import use_catalog
    from tests.helpers import write_config

    config = load(write_config(tmp_path, catalog_name="pfence", table="pfence.events",
                               rejects_table="pfence.rejects"))
    use_catalog(spark, config)  # type: ignore[arg-type]
    stream = config.stream("clicks")
    ensure_tables(spark, config, stream)  # type: ignore[arg-type]
    api = public_sink.PublicIceberg(spark)  # type: ignore[arg-type]
    name = "pfence.pfence.rejects"

    def rows(batch: int) -> object:
        return spark.sql(  # type: ignore[attr-defined]
            f"SELECT 'x' AS raw, CAST(NULL AS BINARY) AS raw_bytes, 'r' AS reason, 'f{batch}' AS source_file, "
            "CAST(NULL AS TIMESTAMP) AS event_hour, "
            f"CAST({batch} AS BIGINT) AS batch_id, 'w' AS writer_id, current_timestamp() AS rejected_at")

    def publish(batch: int, expected: object, staged: object = lambda: None) -> int:
        return public_sink.publish(api, name, rows(batch), summary_properties(stream.writer_id, batch, [], {}),  # type: ignore[arg-type]
                                   stream.writer_id, batch, expected, config.catalog.retry_timeout,  # type: ignore[arg-type]
                                   staged=staged)  # type: ignore[arg-type]

    def marker() -> object:
        return public_sink.table_marker(api.table(name), stream.writer_id)

    def snapshots() -> int:
        return int(api.table(name).snapshots().size())  # type: ignore[attr-defined]

    publish(0, None)
    before_1 = marker()
    assert before_1 is not None and before_1.batch_id == 0  # type: ignore[attr-defined]
    publish(1, before_1)  # the replacement commits batch 1
    count = snapshots()
    with pytest.raises(WriterFencedError, match="moved on under this writer"):
        publish(1, before_1)  # the zombie's batch 1, started from batch 0: refused before staging
    assert snapshots() == count

    # the zombie staged batch 2 while the replacement committed batch 2: its fast-forward fails, it is fenced
    before_2 = marker()
    with pytest.raises(WriterFencedError, match="moved on under this writer"):
        publish(2, before_2, staged=lambda: publish(2, before_2))
    found = marker()
    assert found is not None and found.batch_id == 2  # type: ignore[attr-defined]
    assert spark.table(name).where("batch_id = 2").count() == 1  # type: ignore[attr-defined]

    # another committer's snapshot (a compaction, an expiry) between staging and fast-forward is built upon
    foreign: list[int] = []

    def maintenance() -> None:
        if not foreign:
            api.table(name).newFastAppend().set("laketide.maintenance", "test").commit()  # type: ignore[attr-defined]
            foreign.append(1)

    publish(3, found, staged=maintenance)
    found = marker()
    assert found is not None and found.batch_id == 3  # type: ignore[attr-defined]
    assert spark.table(name).where("batch_id = 3").count() == 1  # type: ignore[attr-defined]
    assert set(api.table(name).refs().keySet().toArray()) == {"main"}  # type: ignore[attr-defined]

    # what the fence relies on: Iceberg commits a fast-forward from exactly the metadata read when
    # manageSnapshots() was called; if main moved meanwhile it fails, it neither rebases nor overwrites main
    table = api.table(name)
    table.manageSnapshots().createBranch("probe").commit()  # type: ignore[attr-defined]
    table.newFastAppend().toBranch("probe").set("probe", "1").commit()  # type: ignore[attr-defined]
    manage = table.manageSnapshots()  # type: ignore[attr-defined]
    table.newFastAppend().set("laketide.maintenance", "moved").commit()  # type: ignore[attr-defined]
    moved = int(api.table(name).currentSnapshot().snapshotId())  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="CommitFailedException"):
        manage.fastForwardBranch("main", "probe").commit()
    assert int(api.table(name).currentSnapshot().snapshotId()) == moved  # type: ignore[attr-defined]
