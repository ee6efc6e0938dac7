"""The one door to non-public Spark/Iceberg APIs: its start-up check, and how the writer picks its commit path
from it (``commit_path: auto | internal | public``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from laketide.errors import ConfigError
from laketide.ingest.writer import choose_commit_path
from laketide.lake import internals


def test_the_check_passes_on_the_versions_it_was_written_for(spark: object) -> None:
    assert internals.versions(spark)[0].startswith("3.5.")  # type: ignore[arg-type]
    assert internals.versions(spark)[1].startswith("1.10.")  # type: ignore[arg-type]
    assert internals.check(spark) is None  # type: ignore[arg-type]


def test_the_check_names_a_version_it_was_not_written_for(spark: object) -> None:
    reason = internals.check(spark, written_for=("3.4", "1.9"))  # type: ignore[arg-type]
    assert reason is not None
    assert "Spark 3.5." in reason and "written for 3.4.x" in reason
    assert "Iceberg 1.10." in reason and "written for 1.9.x" in reason


def test_the_check_names_a_missing_class_or_member(spark: object, monkeypatch: pytest.MonkeyPatch) -> None:
    used = dict(internals.USED)
    used["org.apache.iceberg.spark.FileRewriteCoordinator"] = (("m", "fetchNewFiles"), ("m", "stageFiles"))
    used["org.apache.iceberg.spark.NoSuchCoordinator"] = ()
    monkeypatch.setattr(internals, "USED", used)
    reason = internals.check(spark)  # type: ignore[arg-type]
    assert reason == ("org.apache.iceberg.spark.FileRewriteCoordinator.stageFiles not found; "
                      "class org.apache.iceberg.spark.NoSuchCoordinator not found")


def test_auto_falls_back_to_the_public_path_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    reason = "Iceberg 1.11.0 (written for 1.10.x)"
    with caplog.at_level(logging.INFO, logger="laketide.ingest.writer"):
        assert choose_commit_path("auto", reason) == "public"
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"commit path: public, not internal: {reason} (commit_path: auto)"]
    assert choose_commit_path("auto", None) == "internal"
    assert choose_commit_path("public", None) == "public"


def test_internal_refuses_to_start_when_the_check_fails(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    reason = "Spark 4.0.1 (written for 3.5.x)"
    with pytest.raises(ConfigError, match=r"commit_path is 'internal' but .*Spark 4\.0\.1 \(written for 3\.5\.x\)"):
        choose_commit_path("internal", reason)
    assert choose_commit_path("internal", None) == "internal"

    # the writer's entry point turns it into exit code 2 and the reason
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark_jobs"))
    try:
        import ingest_stream
    finally:
        sys.path.pop(0)
    from laketide.ingest import group

    def refuse(*_args: object) -> None:
        choose_commit_path("internal", reason)

    monkeypatch.setattr(group, "run_group", refuse)
    monkeypatch.setattr(ingest_stream, "get_config", lambda: type("C", (), {"stream": lambda self, _n: None})())
    assert ingest_stream.main(["--stream", "clicks", "--mode", "incremental"]) == 2
    assert "commit_path is 'internal'" in capsys.readouterr().err
