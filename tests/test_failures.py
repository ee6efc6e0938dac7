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
