"""The ``./laketide`` and ``make submit`` commands that docs/operations.md and README.md give, run from a plain shell
in the checkout (no virtualenv on PATH) against a small real lake in a temporary folder: the docs' commands work.

Every such command of the two pages (an inline code span, or a line of a fenced block) is classified in
:data:`DOCUMENTED`: a command added or changed in the docs fails the test until it is classified there. How each
kind is run (placeholders such as ``<id>`` or ``S`` are filled in with the lake's values first):

* ``run``: for real. Every job of ``spark_jobs/`` through ``spark-submit`` (about 20 s each): the writer, as
  ``make submit JOB=ingest_stream.py ARGS="--stream clicks --mode incremental"``, which runs
  ``./laketide submit ingest_stream.py ...`` (its rows are then checked exactly once), a backfill's dry run,
  a maintenance dry run, a repair (nothing to repair: no row changes) and a redo to the table's head (nothing
  discarded, nothing to re-ingest); and the commands that start no Spark (status, reconcile, snapshots, archive);
* ``print``: ``./laketide submit --print JOB ...``: the spark-submit command is built for the job's file, with the
  configuration in force, and nothing runs (the tombstones' expiry: this lake has no upsert stream);
* ``trigger``: redo, backfill, repair and close check their params against the lake and trigger their DAG, here on a
  stand-in ``airflow`` command (``tests.test_cli.fake_airflow``; ``--no-wait`` added: following a run is tested in
  tests/test_cli.py);
* ``skip``: not run, with the reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from laketide.config import REPO_ROOT
from laketide.lake.catalog import load_catalog
from tests.helpers import load, write_config
from tests.test_cli import fake_airflow
from tests.test_writer import assert_exactly_once, produce

PAGES = [REPO_ROOT / "docs" / "operations.md", REPO_ROOT / "README.md"]
HOURS = "--start 2026-11-22T03:00:00+00:00 --end 2026-11-22T05:00:00+00:00"

#: every command the pages give, and how this test runs it; the first ``run`` lands the lake's rows
DOCUMENTED: dict[str, str] = {
    'make submit JOB=ingest_stream.py ARGS="--stream clicks --mode incremental"': "run",
    "./laketide status": "run",
    "./laketide status --stream clicks": "run",
    "./laketide status --stream clicks --all": "run",
    "./laketide reconcile": "run",
    "./laketide reconcile --start <hour>": "run",
    "./laketide snapshots": "run",
    "./laketide snapshots --stream S": "run",
    "./laketide archive --dry-run": "run",
    "./laketide archive": "run",
    f"./laketide submit backfill.py --stream clicks {HOURS}": "run",
    "./laketide submit ingest_stream.py --stream clicks --mode incremental": "print",
    "./laketide submit --print ...": "print",
    "./laketide submit maintain.py --table lake.clicks --actions expire_snapshots": "run",
    "./laketide submit maintain.py --table lake.accounts__tombstones --actions expire_tombstones": "print",
    "./laketide submit redo.py --stream clicks --snapshot-id <id> --dry-run false --run-id <name>": "run",
    f"./laketide submit repair.py --stream clicks {HOURS} --dry-run false": "run",
    "./laketide redo --stream S --snapshot-id ID": "trigger",
    "./laketide redo --stream clicks --snapshot-id <id>": "trigger",
    "./laketide redo --stream clicks --snapshot-id <id> --apply": "trigger",
    f"./laketide backfill --stream clicks {HOURS}": "trigger",
    f"./laketide repair --stream clicks {HOURS} --apply": "trigger",
    "./laketide close --stream clicks --start 2012-03-05T00:00:00+00:00 --end 2012-03-07T00:00:00+00:00": "trigger",
    "./laketide airflow backfill create --dag-id laketide_close_clicks --from-date 2012-03-05T00:00:00+00:00 "
    "--to-date 2012-03-06T23:00:00+00:00 --max-active-runs 4": "skip: Airflow's own command, needs its database",
    "./laketide airflow dags list-runs laketide_backfill": "skip: Airflow's own command, needs its database",
    "./laketide airflow ...": "skip: the form of a command",
    "./laketide submit JOB ARGS...": "skip: the form of a command",
    'make submit JOB=... ARGS="..."': "skip: the form of a command",
}


#: what a job run for real prints (its report), by the job's file
JOB_SAYS = {"maintain.py": "lake.clicks expire_snapshots: ", "repair.py": "nothing to repair",
            "redo.py": "done: redo docs-check of clicks", "backfill.py": "DRY RUN: "}


def documented() -> set[str]:
    """The ``./laketide`` and ``make submit`` commands of the pages, whitespace collapsed, comments dropped."""
    found: set[str] = set()
    for page in PAGES:
        text = page.read_text()
        found |= {" ".join(span.split()) for span in re.findall(r"`(\./laketide [^`]+|make\s+submit[^`]*)`", text)}
        fenced = False
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif fenced and line.startswith(("./laketide ", "make submit ")):
                found.add(" ".join(line.split(" #")[0].split()))
    return found


def test_every_documented_command_is_classified() -> None:
    found = documented()
    assert found - DOCUMENTED.keys() == set(), "commands the docs give that this test does not run: classify them"
    assert DOCUMENTED.keys() - found == set(), "commands this test runs that the docs no longer give: remove them"


def shell_line(command: str, values: dict[str, str]) -> str:
    """The documented ``command`` as this test runs it: placeholders filled in, ``--print`` or ``--no-wait`` added
    as its kind says."""
    kind = DOCUMENTED[command]
    for placeholder, value in values.items():
        command = command.replace(placeholder, value)
    if kind == "print" and "--print" not in command:
        command = command.replace("./laketide submit ", "./laketide submit --print ", 1)
    if kind == "trigger" and not command.startswith("./laketide close "):
        command += " --no-wait"
    return command


@pytest.mark.slow
def test_the_documented_commands_run_from_a_plain_shell(tmp_path: Path) -> None:
    config_path = write_config(tmp_path / "lake")
    produce(config_path, "--start", "2026-11-22T03:00:00+00:00", "--hours", "3", "--events-per-hour", "200",
            "--malformed-ratio", "0.05", "--seed", "5")
    trigger_env, asked = fake_airflow(tmp_path / "airflow")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKETIDE", "AIRFLOW", "VIRTUAL_ENV"))}
    env.update(trigger_env, LAKETIDE_CONFIG=str(config_path), PATH="/usr/local/bin:/usr/bin:/bin")
    values = {"--stream S": "--stream clicks", "<name>": "docs-check", "<hour>": "2026-11-22T03:00:00+00:00",
              "--print ...": "--print ingest_stream.py --stream clicks --mode incremental"}
    for command, kind in DOCUMENTED.items():  # in the order above: the writer first
        if kind.startswith("skip"):
            continue
        shell = shell_line(command, values)
        done = subprocess.run(["bash", "-c", shell], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{shell}\n{output[-3000:]}"
        assert "ClassNotFoundException" not in output and "Traceback" not in output, f"{shell}\n{output[-3000:]}"
        if kind == "print":
            job = shell.split("--print ")[1].split()[0]
            assert done.stdout.startswith("spark-submit --master ") and f"spark_jobs/{job} " in done.stdout, shell
        if command.startswith("make submit JOB=ingest_stream.py"):
            assert_exactly_once(config_path)
            table = load_catalog(load(config_path).catalog).load_table("lake.clicks")
            values.update({"<id>": str(table.metadata.current_snapshot_id),
                           "--snapshot-id ID": f"--snapshot-id {table.metadata.current_snapshot_id}"})
        if command.startswith("./laketide submit backfill.py"):
            assert "DRY RUN: " in done.stdout and '"dry_run": true' in done.stdout, done.stdout[-3000:]
        if kind == "run" and (says := JOB_SAYS.get(shell.split()[2] if "submit " in shell else "")):
            assert says in done.stdout, f"{shell}\n{done.stdout[-3000:]}"
    assert_exactly_once(config_path)  # the repair and the redo to the head changed no row
    triggered = [json.loads(line)["argv"] for line in asked.read_text().splitlines()]
    assert [argv[2] for argv in triggered] == ["laketide_redo", "laketide_redo", "laketide_redo", "laketide_backfill",
                                              "laketide_repair", "laketide_close_clicks"]
