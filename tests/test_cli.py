"""``./laketide``, from a plain shell: it finds its virtualenv, configuration and Airflow home by itself; ``status``
lists the hours being written, ``snapshots`` the ids a redo needs, ``reconcile`` exits 0 when hours only wait for
the writer; ``redo``, ``backfill`` and ``repair`` check their params first and trigger their DAG as a dry run
unless told otherwise, then wait for the run and print what it recorded (here against a stand-in ``airflow``
command that records what it was asked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from laketide.close.reconcile import PartitionCounts, Report
from laketide.config import REPO_ROOT
from laketide.ingest.inspection import Finding, Reason
from laketide.lake.catalog import load_catalog
from tests.lake import Lake

LAKETIDE = REPO_ROOT / "laketide"


def run(*args: str, config: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``./laketide ARGS`` from a plain shell: no virtualenv on PATH, no laketide variables but those given."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LAKETIDE", "AIRFLOW", "VIRTUAL_ENV"))}
    environ["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    if config is not None:
        environ["LAKETIDE_CONFIG"] = str(config)
    environ.update(env)
    return subprocess.run([str(LAKETIDE), *args], env=environ, capture_output=True, text=True, timeout=300,
                          cwd="/")


def test_help_from_a_plain_shell() -> None:
    done = run("--help")
    assert done.returncode == 0, done.stderr
    for command in ("status", "reconcile", "snapshots", "submit", "redo", "backfill", "repair"):
        assert command in done.stdout


def test_submit_print_as_documented_and_the_job_is_told_its_configuration(tmp_path: Path) -> None:
    """``./laketide submit --print JOB ...`` (the option before the job, as docs/operations.md writes it) shows the
    spark-submit command; a job submitted by hand is given the configuration in force (its driver imports laketide
    from the --py-files zip, from where the default configuration's path is not the checkout's)."""
    from laketide.config.loading import DEFAULT_CONFIG
    from laketide.lake.submit import job_env
    from tests.helpers import write_config

    config = write_config(tmp_path)
    done = run("submit", "--print", "ingest_stream.py", "--stream", "clicks", "--mode", "incremental", config=config)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("spark-submit --master ") and "ingest_stream.py --stream clicks" in done.stdout
    assert "./laketide submit --print" in (REPO_ROOT / "docs" / "operations.md").read_text()
    assert job_env({"PATH": "/usr/bin"})["LAKETIDE_CONFIG"] == str(DEFAULT_CONFIG.resolve())
    assert job_env({"LAKETIDE_CONFIG": str(config)})["LAKETIDE_CONFIG"] == str(config.resolve())


def test_status_lists_the_hours_being_written_and_snapshots_the_ids(lake: Lake) -> None:
    done = run("status", config=lake.config_path)
    assert done.returncode == 0, done.stderr
    current = lake.hours[-1] + timedelta(hours=1)  # the lake's hours end just before the current hour
    assert f"{current.isoformat()}" in done.stdout and "(checked now)" in done.stdout, done.stdout
    assert "table health" in done.stdout and "lake.clicks" in done.stdout.split("table health")[1], done.stdout
    done = run("snapshots", "--limit", "5", config=lake.config_path)
    assert done.returncode == 0, done.stderr
    current_id = load_catalog(lake.config.catalog).load_table("lake.clicks").metadata.current_snapshot_id
    assert str(current_id) in done.stdout and "writer clicks-writer batch" in done.stdout, done.stdout
    assert "./laketide redo --stream clicks --snapshot-id ID" in done.stdout


RUN_ID = "manual__2026-11-28T06:00:00+00:00"


def fake_airflow(folder: Path, run_id: str = RUN_ID, state: str = "running") -> tuple[dict[str, str], Path]:
    """A stand-in ``airflow`` command (in ``folder``) that records what it was asked (the second value: one JSON line
    a call) and answers as Airflow's CLI does: ``dags trigger --output json`` with the run as a list of one (warnings
    on stderr), ``dags list-runs --output json`` with the run in ``state``; and an Airflow home to find."""
    folder.mkdir(exist_ok=True)
    recorded = folder / "asked.json"
    fake = folder / "airflow"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"open({str(recorded)!r}, 'a').write(json.dumps({{'argv': sys.argv[1:], "
                    "'home': os.environ.get('AIRFLOW_HOME')}) + '\\n')\n"
                    "print('SomeWarning: a warning of the CLI', file=sys.stderr)\n"
                    # Airflow 3.3 logs to stdout too, before the JSON
                    "print('2026-11-28T06:00:00.000000Z [info     ] creating dag run [airflow.serialization] loc=x')\n"
                    f"run = {{'dag_id': sys.argv[3], 'run_id': {run_id!r}, 'state': 'queued', 'conf': {{}}}}\n"
                    f"if sys.argv[2] == 'list-runs': run = dict(run, state={state!r})\n"
                    "print(json.dumps([run]))\n")
    fake.chmod(0o755)
    home = folder / "airflow-home"
    home.mkdir()
    (home / "airflow.db").touch()
    return {"LAKETIDE_AIRFLOW_CLI": str(fake), "AIRFLOW_HOME": str(home)}, recorded


def asked(recorded: Path, command: str = "trigger") -> list[tuple[list[str], str]]:
    calls = [json.loads(line) for line in recorded.read_text().splitlines()] if recorded.exists() else []
    return [(c["argv"], c["home"]) for c in calls if c["argv"][:2] == ["dags", command]]


def test_manual_actions_check_then_trigger_a_dry_run(lake: Lake, tmp_path: Path) -> None:
    env, recorded = fake_airflow(tmp_path)
    snapshot = load_catalog(lake.config.catalog).load_table("lake.clicks").metadata.current_snapshot_id

    # a refused param changes nothing and triggers nothing
    done = run("redo", "--stream", "clicks", "--snapshot-id", "12345", config=lake.config_path, **env)
    assert done.returncode == 2 and "snapshot" in done.stderr and not recorded.exists(), done.stderr
    done = run("backfill", "--stream", "clicks; DROP", "--start", "x", "--end", "y", config=lake.config_path, **env)
    assert done.returncode == 2 and "error: " in done.stderr and not recorded.exists()
    done = run("repair", "--stream", "clicks", "--start", "x", "--end", "y", "--wait", "0", config=lake.config_path)
    assert done.returncode == 2 and "--wait 0: give a number of seconds above 0" in done.stderr, done.stderr

    done = run("redo", "--stream", "clicks", "--snapshot-id", str(snapshot), "--no-wait", config=lake.config_path,
               **env)
    assert done.returncode == 0, done.stderr
    # not waiting: the plan as the table is now, then which run started and where to follow it (not Airflow's
    # table, not its warnings)
    assert "the redo would do this:" in done.stdout and f"snapshot {snapshot}" in done.stdout, done.stdout
    assert "laketide_redo: run manual__2026-11-28T06:00:00+00:00 queued (a dry run: nothing changes)" in done.stdout
    assert "/dags/laketide_redo/runs/manual__2026-11-28T06%3A00%3A00%2B00%3A00 (its plan: the log of task " \
           "'validate')" in done.stdout and "SomeWarning" not in done.stdout + done.stderr, done.stdout
    start, end = lake.hours[0].isoformat(), lake.hours[1].isoformat()
    # --apply does not wait (unless told to)
    assert run("repair", "--stream", "clicks", "--start", start, "--end", end, "--apply", config=lake.config_path,
               **env).returncode == 0
    (redo_args, redo_home), (repair_args, _) = asked(recorded)
    assert redo_args[:3] == ["dags", "trigger", "laketide_redo"] and redo_home == str(env["AIRFLOW_HOME"])
    redo_conf = json.loads(redo_args[redo_args.index("--conf") + 1])
    assert redo_conf["dry_run"] is True and redo_conf["snapshot_id"] == str(snapshot)
    repair_conf = json.loads(repair_args[repair_args.index("--conf") + 1])
    assert repair_args[2] == "laketide_repair" and repair_conf == {"stream": "clicks", "start": start, "end": end,
                                                                    "dry_run": False}
    assert asked(recorded, "list-runs") == []


def own_action_table(lake: Lake, tmp_path: Path) -> Path:
    """The lake's configuration with an action table of this test's own (the lake is shared)."""
    import yaml

    raw = yaml.safe_load(lake.config_path.read_text())
    raw.setdefault("close", {})["action_table"] = f"laketide.cli_actions_{tmp_path.name.replace('-', '_')}"
    path = tmp_path / "laketide.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_dry_run_waits_for_its_run_and_prints_what_it_recorded(lake: Lake, tmp_path: Path) -> None:
    """A dry run waits for its run and prints the plan as the run recorded it in the action record (the lines the
    UI's history shows), not one computed beside it; a failed run and one that does not end in time are named, with
    where to follow them."""
    from laketide.config.loading import load_config
    from laketide.redo import actions

    config_path = own_action_table(lake, tmp_path)
    config = load_config(config_path, environ={})
    snapshot = load_catalog(config.catalog).load_table("lake.clicks").metadata.current_snapshot_id
    report = ["DRY RUN: nothing changes; the redo would do this:", f"return lake.clicks to snapshot {snapshot}"]
    # what the run's validate task records (another run's record is not this one's)
    actions.record(config, actions.ActionRecord(RUN_ID, "redo", "clicks", "dry_run", True, "admin", RUN_ID,
                                                report="\n".join(report)),
                   actions.ActionRecord("other", "redo", "clicks", "dry_run", True, "admin", "manual__other",
                                        report="not this one"))
    env, recorded = fake_airflow(tmp_path / "done")
    done = run("redo", "--stream", "clicks", "--snapshot-id", str(snapshot), config=config_path, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the redo would do this:" not in done.stdout.splitlines()  # no plan computed beside the run's
    assert f"laketide_redo: run {RUN_ID} recorded dry_run at " in done.stdout, done.stdout
    assert "\n".join(f"  {line}" for line in report) in done.stdout and "not this one" not in done.stdout
    assert [argv[2] for argv, _ in asked(recorded, "list-runs")] == ["laketide_redo"]

    start, end = lake.hours[0].isoformat(), lake.hours[1].isoformat()
    env, _ = fake_airflow(tmp_path / "failed", "manual__failed", "failed")
    done = run("backfill", "--stream", "clicks", "--start", start, "--end", end, config=config_path, **env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "error: laketide_backfill: run manual__failed failed: its task logs say why: http://" in done.stderr

    env, _ = fake_airflow(tmp_path / "slow", "manual__slow", "queued")
    done = run("repair", "--stream", "clicks", "--start", start, "--end", end, "--wait", "1", config=config_path,
               **env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "error: laketide_repair: run manual__slow is still queued after 1 s (is the DAG paused" in done.stderr


def test_without_a_local_airflow_it_says_what_to_do(lake: Lake, tmp_path: Path) -> None:
    done = run("repair", "--stream", "clicks", "--start", lake.hours[0].isoformat(), "--end",
               lake.hours[1].isoformat(), config=lake.config_path, AIRFLOW_HOME=str(tmp_path / "none"))
    assert done.returncode == 2 and "no Airflow installation" in done.stderr and "make run" in done.stderr


@pytest.mark.parametrize(("report", "problems"), [
    (Report([PartitionCounts("h1", 10, 7, 1, pending=1)], pending_files=["f.jsonl"]), []),  # only waiting
    (Report([PartitionCounts("h1", 10, 9, 1)]), []),
    (Report([PartitionCounts("h1", 10, 7, 1)]), ["h1: MISMATCH"]),
    (Report([PartitionCounts("h1", 10, 9, 1)], duplicate_ids={"e": 2}), ["1 event id(s) held more than once"]),
    (Report([], findings=[Finding("x.JSONL", Reason.NOT_DATA, "never read", ("h1",), blocking=True)]),
     ["landing file x.JSONL: not a data file: never read"]),
    (Report([], findings=[Finding("notes.txt", Reason.NOT_DATA, "never read", (), blocking=False)]), []),
])
def test_reconcile_fails_only_for_a_problem(report: Report, problems: list[str]) -> None:
    assert report.problems() == problems


def test_reconcile_without_tables_names_them(tmp_path: Path) -> None:
    from tests.helpers import write_config

    done = run("reconcile", config=write_config(tmp_path))
    assert done.returncode == 2 and "does not exist in catalog" in done.stderr and "Traceback" not in done.stderr
