"""An upsert stream with its catalog on PostgreSQL, and that database stopped under the running writer between a
batch's change-log commit and its merge (a throwaway PostgreSQL server, the real writer process)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from laketide.lake.catalog import load_catalog
from tests.helpers import kill_group, load, start_writer, wait_for, wait_for_log, writer_log
from tests.pg import PgCluster
from tests.test_fencing import use_catalog
from tests.test_upsert import Landing, change, fold, merged, upsert_config

pytestmark = pytest.mark.slow


def test_postgresql_stopped_between_the_change_log_and_the_merge_is_waited_out(tmp_path: Path) -> None:
    """The writer holds after batch 1's change log is committed, before its merge; the database stops, the writer
    is let go: its merge meets the stopped catalog and waits (retries, no failure, no restart); the database starts
    again: that merge and the next batch's land, the merged table is the fold of every change, each logged once."""
    cluster = PgCluster()
    cluster.start()
    try:
        config_path = use_catalog(upsert_config(tmp_path, catalog="laketide", trigger_interval="1s"),
                                  cluster.createdb("catalog"))
        stream = load(config_path).stream("clicks")
        landing = Landing(stream.landing_path)
        landing.land([change("a", 1, "c", 10), change("b", 1, "c", 20), change("c", 1, "c", 30)])
        faults = tmp_path / "faults"
        writer = start_writer(config_path, mode="continuous", LAKETIDE_FAULT="before_merge:1",
                              LAKETIDE_FAULT_MODE="hold", LAKETIDE_FAULT_DIR=str(faults))
        try:
            wait_for_log(config_path, "merged into lake.accounts", writer, timeout=300)  # batch 0
            landing.land([change("a", 3, "u", 11), change("b", 2, "d"), change("d", 1, "c", 40)])  # batch 1
            wait_for(faults / "before_merge-1.reached", writer, timeout=300)
            cluster.stop()
            (faults / "before_merge-1.release").touch()
            deadline = time.monotonic() + 120
            while "merge of batch 1 of clicks: catalog busy or unreachable (attempt" not in writer_log(config_path):
                assert writer.poll() is None and time.monotonic() < deadline, writer_log(config_path)[-5000:]
                time.sleep(0.5)
            time.sleep(5)  # a few more of its attempts against the stopped database
            assert writer.poll() is None, writer_log(config_path)[-5000:]
            cluster.start()
            # then: an update, a new key, and two changes older than what the merged table holds: a's version 2 after
            # its version 3, b's insert after its delete (its tombstone keeps it deleted)
            landing.land([change("c", 2, "u", 31), change("e", 1, "c", 50), change("a", 2, "u", 99),
                          change("b", 1, "c", 21, cid="b-late")])
            expected = fold(landing.changes)
            deadline = time.monotonic() + 240
            while True:
                try:
                    if merged(config_path) == expected:
                        break
                except AssertionError:  # a key twice in the merged table
                    raise
                except Exception:  # the merged table mid-commit, or the database still starting: read it again
                    pass
                assert writer.poll() is None and time.monotonic() < deadline, writer_log(config_path)[-5000:]
                time.sleep(1)
            (stream.checkpoint_path.parent / "clicks.stop").touch()
            assert writer.wait(timeout=180) == 0, writer_log(config_path)[-5000:]
        finally:
            if writer.poll() is None:
                kill_group(writer)
        text = writer_log(config_path)
        assert "Traceback" not in text and "stopped:" not in text, text[-5000:]
        assert merged(config_path) == expected == {"a": (3, 11, None), "c": (2, 31, None), "d": (1, 40, None),
                                                   "e": (1, 50, None)}
        rows = load_catalog(load(config_path).catalog).load_table("lake.account_changes").scan().to_arrow()
        assert sorted(rows.column("change_id").to_pylist()) == sorted(c["change_id"] for c in landing.changes)
    finally:
        cluster.destroy()
