"""The writer benchmark's record (bench/writer_record.json) names the writer on this tree: a change of the writer's
per-batch modules comes with a run of ``bench/bench_writers.py --record``, so a slower writer cannot pass unseen."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.writer_record import FLOOR, INGEST, MIN_ROUNDS, RECORD, WRITER_MODULES, read, writer_digest


def test_the_record_was_measured_on_this_writer() -> None:
    record = read()
    assert record["modules"] == list(WRITER_MODULES)
    assert record["writer_sha256"] == writer_digest(), (
        f"the writer's modules (include/laketide/ingest/{{{','.join(WRITER_MODULES)}}}) changed since "
        f"bench/bench_writers.py last measured them (recorded sha256 {record['writer_sha256'][:12]}, now "
        f"{writer_digest()[:12]}): run `.venv/bin/python bench/bench_writers.py --rounds {MIN_ROUNDS} --record` on an "
        f"idle machine and commit {RECORD.name} with the change (bench/README.md)")


def test_the_recorded_ratio_is_not_a_regression() -> None:
    record = read()
    assert record["rounds"] >= MIN_ROUNDS and len(record["per_round"]) == record["rounds"]
    assert record["laketide_native"] >= FLOOR, (
        f"the writer was measured at {record['laketide_native']}x the native sink (floor {FLOOR}x, target "
        f"{record['target']}x): find what made it slower before merging")


def test_any_change_of_a_writer_module_changes_the_digest(tmp_path: Path) -> None:
    for name in WRITER_MODULES:
        shutil.copy(INGEST / name, tmp_path / name)
    assert writer_digest(tmp_path) == writer_digest()
    for name in WRITER_MODULES:
        original = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(original + b"\n")
        assert writer_digest(tmp_path) != writer_digest(), name
        (tmp_path / name).write_bytes(original)


def test_a_record_is_only_taken_of_the_default_input_in_enough_rounds() -> None:
    from bench.bench_writers import parse_args

    too_few = str(MIN_ROUNDS - 1)
    for argv in (["--record", "--rounds", too_few], ["--record", "--events", "1000"], ["--record", "--files", "4"]):
        with pytest.raises(SystemExit) as exit_:
            parse_args(argv)
        assert exit_.value.code == 2
    assert parse_args(["--record", "--rounds", str(MIN_ROUNDS)]).record
