"""A batch that keeps failing is recorded with its attempts and named with what to do."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from laketide.ingest import failures
from tests.helpers import load, write_config


def test_repeated_failures_of_one_batch_are_counted_then_cleared(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    stream = load(write_config(tmp_path)).stream("clicks")
    caplog.set_level(logging.ERROR, "laketide.ingest.writer")
    failures.record(stream, 7, object(), RuntimeError("boom"))  # no readable plan: no file named, no crash
    assert failures.read(stream) is not None and failures.read(stream)["attempts"] == 1  # type: ignore[index]
    assert "batch 7 of stream clicks failed: RuntimeError: boom" in caplog.text
    failures.record(stream, 7, object(), RuntimeError("boom"))
    recorded = failures.read(stream)
    assert recorded is not None and recorded["attempts"] == 2 and recorded["batch_id"] == 7
    assert "failed 2 times in a row" in caplog.text and "move it out of" in caplog.text
    failures.record(stream, 8, object(), RuntimeError("other"))  # another batch starts the count again
    assert failures.read(stream)["attempts"] == 1  # type: ignore[index]
    failures.clear(stream, 7)  # an older batch committing does not clear a newer failure
    assert failures.read(stream) is not None
    failures.clear(stream, 8)
    assert failures.read(stream) is None


def test_a_checkpoint_or_fence_refusal_does_not_blame_the_files(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A batch stopped because the checkpoint and the table disagree (or another writer committed) is recorded,
    but its log says its files are not the cause, not to replay it or move them."""
    from laketide.errors import CheckpointMismatchError, WriterFencedError

    stream = load(write_config(tmp_path)).stream("clicks")
    caplog.set_level(logging.ERROR, "laketide.ingest.writer")
    for exc in (CheckpointMismatchError("checkpoint renumbered"), WriterFencedError("fenced")):
        failures.record(stream, 3, object(), exc)
        failures.record(stream, 3, object(), exc)
    assert "are not the cause" in caplog.text and "checkpoint renumbered" in caplog.text
    assert "replayed from the checkpoint" not in caplog.text and "move it out of" not in caplog.text
    assert failures.read(stream)["error"].startswith("WriterFencedError")  # type: ignore[index]


def test_a_full_disk_is_its_own_exit_code(tmp_path: Path) -> None:
    """A batch that fails with ENOSPC ends the writer with exit 8 and one line saying what to do (not exit 1 and a
    traceback); the error Spark hands over is text, as from a real query."""
    import sys

    from laketide.errors import StorageFullError
    from laketide.ingest.runner import _await

    sys.path.insert(0, str(Path(__file__).parents[1] / "spark_jobs"))
    from ingest_stream import EXIT_CODES

    class Query:
        def awaitTermination(self, timeout: int) -> bool:
            raise RuntimeError("StreamingQueryException: [FOREACH_BATCH_USER_FUNCTION_ERROR] ...\n"
                               "java.io.IOException: No space left on device\n\tat java.io.FileOutputStream...")

    with pytest.raises(StorageFullError, match="disk the writer writes to is full") as raised:
        _await(Query())  # type: ignore[arg-type]
    assert EXIT_CODES[type(raised.value)] == 8


def test_reconcile_names_a_bad_configuration_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers import config_env

    bad = tmp_path / "laketide.yaml"
    bad.write_text("catalog: {uri: 'mysql://nope'}\n")
    done = subprocess.run([sys.executable, "-m", "laketide.close.reconcile"], env=config_env(bad),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr, done.stderr


def test_deaths_of_the_application_name_the_batch_then_hold_its_stream_out(tmp_path: Path) -> None:
    """A batch left in flight by an application that died is a death of that batch; the same batch in flight at two
    deaths in a row holds its stream out, until one of its files is moved out of data/ (or the record deleted)."""
    import json

    from laketide.ingest.landing import data_dir

    stream = load(write_config(tmp_path)).stream("clicks")
    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True)
    for name in ("f1.jsonl", "f2.jsonl"):
        (folder / name).write_text("{}\n")

    def left_in_flight(batch_id: int) -> None:  # what failures.begin leaves when the JVM dies in the batch
        failures.in_flight_path(stream).parent.mkdir(parents=True, exist_ok=True)
        failures.in_flight_path(stream).write_text(json.dumps(
            {"batch_id": batch_id, "files": ["f1.jsonl", "f2.jsonl"], "owner": "elsewhere:1", "started_at": "t"}))

    assert failures.died(stream) is None  # the last application did not die with a batch in flight
    left_in_flight(4)
    first = failures.died(stream)
    assert first is not None and first["deaths"] == 1 and first["files"] == ["f1.jsonl", "f2.jsonl"]
    assert not failures.in_flight_path(stream).exists() and failures.held_out(stream) is None
    left_in_flight(5)  # another batch: the count starts again
    assert failures.died(stream)["deaths"] == 1  # type: ignore[index]
    left_in_flight(5)
    failures.forget(stream)  # a clean stop forgets this process's batch in flight, never another process's
    assert failures.in_flight_path(stream).exists()
    assert failures.died(stream)["deaths"] == 2  # type: ignore[index]
    held = failures.held_out(stream)
    assert held is not None and held["batch_id"] == 5
    reason = failures.hold_out_reason(stream, held)
    assert "f1.jsonl, f2.jsonl" in reason and str(folder) in reason and str(failures.record_path(stream)) in reason
    (folder / "f2.jsonl").rename(tmp_path / "f2.jsonl")  # the operator moved a named file out
    assert failures.held_out(stream) is None and failures.read(stream)["deaths"] == 0  # type: ignore[index]
    failures.clear(stream, 5)  # the batch committed without it
    assert failures.read(stream) is None


def test_a_batch_cut_short_by_a_stop_is_no_failure() -> None:
    """A stop of the process group ends the JVM and the driver at once: the batch's thread may see the JVM go before
    the main thread runs the signal's handler. A py4j error waits for the stop a moment; bad input never does."""
    import threading
    import time

    from py4j.protocol import Py4JError, Py4JNetworkError

    from laketide.errors import ConfigError

    failures.stop_asked(False)
    started = time.monotonic()
    assert not failures.cut_by_stop(Py4JError("An error occurred while calling o12.append"), wait=0.2)
    assert time.monotonic() - started >= 0.2  # no stop came: a failure of the batch, recorded as such
    assert not failures.cut_by_stop(ValueError("bad row"), wait=5)  # not py4j's: no wait, the batch's own

    threading.Timer(0.3, failures.stop_asked).start()  # the handler runs after the batch's thread saw the JVM go
    try:
        assert failures.cut_by_stop(Py4JNetworkError("Answer from Java side is empty"), wait=10)
        assert failures.cut_by_stop(RuntimeError("anything, once the stop is asked"), wait=0)
        assert not failures.cut_by_stop(ConfigError("a bad stream"), wait=0)  # laketide's own: the batch's fault
    finally:
        failures.stop_asked(False)
