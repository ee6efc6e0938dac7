"""Spark on a cluster by configuration, without a JVM: each application's limits (cores, memory) reach
``spark-submit`` through the configuration and the operator, and cluster deploy mode is refused at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowFailException

from laketide.airflow.operators import LaketideSparkSubmitOperator
from laketide.config import load_config
from laketide.errors import ConfigError, DeployModeError
from laketide.lake.spark import check_deploy_mode, executor_paths, submit_command, submit_conf
from tests.helpers import write_group_config

RESOURCES = {
    "writer": {"cores": 1, "executor_memory": "512m"},
    "maintenance": {"cores": 2, "executor_cores": 1, "executor_memory": "768m", "driver_memory": "1g"},
    "actions": {"cores": 1, "conf": {"spark.executor.instances": "1"}},
}


def _config(tmp_path: Path, resources: dict[str, Any] | None = RESOURCES, groups: dict[str, Any] | None = None,
            python: str | None = None) -> Path:
    path = write_group_config(tmp_path, ["a", "b"], group="g")
    raw = yaml.safe_load(path.read_text())
    if resources is not None:
        raw["spark"]["resources"] = resources
    if python is not None:
        raw["spark"]["python"] = python
    if groups is not None:
        raw["writer_groups"] = groups
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_each_kind_of_application_gets_its_limits(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, groups={"g": {"resources": {"cores": 3, "driver_memory": "2g"}}}),
                         environ={})
    writer = submit_conf(config, "ingest_stream.py", ["--group", "g", "--mode", "continuous"])
    # the group's own keys over spark.resources.writer, the rest inherited
    assert writer["spark.cores.max"] == "3" and writer["spark.driver.memory"] == "2g"
    assert writer["spark.executor.memory"] == "512m" and "spark.executor.cores" not in writer
    # a one-stream run of the same group (--stream) is the same application kind with the same limits
    assert submit_conf(config, "ingest_stream.py", ["--stream", "a", "--mode", "incremental"])["spark.cores.max"] == "3"
    maintain = submit_conf(config, "maintain.py", ["--table", "lake.a"])
    assert (maintain["spark.cores.max"], maintain["spark.executor.cores"]) == ("2", "1")
    assert (maintain["spark.executor.memory"], maintain["spark.driver.memory"]) == ("768m", "1g")
    for job in ("redo.py", "backfill.py", "repair.py"):
        action = submit_conf(config, job, ["--stream", "a"])
        assert action["spark.cores.max"] == "1" and action["spark.executor.instances"] == "1"
        assert action["spark.executor.memory"] == "1g"  # the kind's default, not the writers'
    # the settings are on the command line laketide itself builds
    command = submit_command(config, "maintain.py", ["--table", "lake.a"], master="spark://127.0.0.1:7077")
    assert "spark.cores.max=2" in command and command[command.index("--master") + 1] == "spark://127.0.0.1:7077"


def test_defaults_cap_every_application(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, resources=None), environ={})
    for job in ("ingest_stream.py", "maintain.py", "redo.py"):
        conf = submit_conf(config, job, ["--group", "g"])
        # never uncapped: without spark.cores.max the first application takes every core of a standalone cluster
        assert conf["spark.cores.max"] == "2" and conf["spark.executor.memory"] == "1g"
        assert conf["spark.pyspark.python"] == sys.executable


def test_executors_python_and_shared_paths(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, python="/opt/laketide/venv/bin/python"), environ={})
    conf = submit_conf(config, "maintain.py", [])
    assert conf["spark.pyspark.python"] == "/opt/laketide/venv/bin/python"
    assert conf["spark.pyspark.driver.python"] == sys.executable
    paths = executor_paths(config)
    assert paths[0] == f"warehouse {tmp_path / 'warehouse'}"
    assert [p.split()[4] for p in paths[1:]] == ["a", "b"]


@pytest.mark.parametrize(("resources", "message"), [
    ({"writer": {"executor_memory": "lots"}}, "spark.resources.writer.executor_memory"),
    ({"writer": {"driver_memory": "256m"}}, "below 450m"),
    ({"maintenance": {"cores": 1, "executor_cores": 2}}, "executor_cores: 2 is more than cores"),
    ({"cluster": {"cores": 1}}, "spark.resources.cluster"),
    ({"writer": {"cores": 0}}, "spark.resources.writer.cores"),
])
def test_bad_limits_name_the_key(tmp_path: Path, resources: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_config(tmp_path, resources=resources), environ={})


def test_group_limits_checked_with_what_they_inherit(tmp_path: Path) -> None:
    path = _config(tmp_path, resources={"writer": {"cores": 1}}, groups={"g": {"resources": {"executor_cores": 2}}})
    with pytest.raises(ConfigError, match=r"writer_groups\.g\.resources\.executor_cores: 2 is more than cores \(1\)"):
        load_config(path, environ={})


def test_executors_python_must_be_absolute(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"spark\.python"):
        load_config(_config(tmp_path, python="python3"), environ={})


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn", "k8s://https://k8s.example:6443"])
def test_cluster_deploy_mode_refused_naming_the_setting(master: str) -> None:
    check_deploy_mode(master, None, "connection 'spark_default'")
    check_deploy_mode(master, "client", "connection 'spark_default'")
    with pytest.raises(DeployModeError, match=r"[Rr]emove \"deploy-mode\"") as caught:
        check_deploy_mode(master, "cluster", "connection 'spark_default'")
    assert "connection 'spark_default'" in str(caught.value) and master in str(caught.value)
    with pytest.raises(DeployModeError, match="'sideways' is not a Spark deploy mode"):
        check_deploy_mode(master, "sideways", "connection 'spark_default'")


def _operator(job: str = "maintain.py", args: list[str] | None = None, **kwargs: Any) -> LaketideSparkSubmitOperator:
    return LaketideSparkSubmitOperator(task_id="job", job=job, job_args=args or ["--table", "lake.a"], **kwargs)


def test_operator_fails_at_once_in_cluster_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKETIDE_CONFIG", str(_config(tmp_path)))
    submitted: list[str] = []
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: submitted.append("spark-submit"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077, "extra": {"deploy-mode": "cluster"}}))
    # AirflowFailException: the task fails without its retries (the provider's own refusal of env_vars in
    # standalone-cluster mode is an AirflowException, retried for as long as the task's retries last)
    with pytest.raises(AirflowFailException, match="'spark_default' asks for deploy mode 'cluster' "
                                                   r"\(master spark://127.0.0.1:7077\)"):
        _operator(retries=5).execute({})
    # the operator's own deploy_mode wins over the connection's, as in the provider's hook
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn"}))
    with pytest.raises(AirflowFailException, match="master yarn"):
        _operator(deploy_mode="cluster").execute({})
    assert submitted == []


def test_operator_puts_the_limits_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKETIDE_CONFIG", str(_config(tmp_path, groups={"g": {"resources": {"cores": 3}}})))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077, "extra": {"deploy-mode": "client"}}))
    commands: list[list[str]] = []

    def build(self: SparkSubmitOperator, context: Any) -> None:  # the provider's own command line, not run
        hook = self._get_hook()
        assert isinstance(hook, SparkSubmitHook)
        commands.append(hook._build_spark_submit_command(self.application))

    monkeypatch.setattr(SparkSubmitOperator, "execute", build)
    _operator("ingest_stream.py", ["--group", "g", "--mode", "continuous"]).execute({})
    _operator("maintain.py").execute({})
    writer, maintain = commands
    assert writer[writer.index("--master") + 1] == "spark://127.0.0.1:7077"
    assert "spark.cores.max=3" in writer and "spark.executor.memory=512m" in writer
    assert "spark.cores.max=2" in maintain and "spark.driver.memory=1g" in maintain
    assert "--deploy-mode" in writer and writer[writer.index("--deploy-mode") + 1] == "client"


#: imports a laketide module and prints its file, how many laketide modules were compiled from source, and how many
#: laketide modules were loaded
IMPORT_PROBE = """
import builtins, sys
real, compiled = builtins.compile, []
builtins.compile = lambda source, name, *a, **k: (compiled.append(str(name)), real(source, name, *a, **k))[1]
import laketide.ingest.runner as module
print(module.__file__, sum("/laketide/" in n for n in compiled), sum(n.startswith("laketide") for n in sys.modules))
"""


def _import_from(archive: Path) -> list[str]:
    return subprocess.run([sys.executable, "-c", IMPORT_PROBE], env={"PYTHONPATH": str(archive), "PATH": ""},
                          capture_output=True, text=True, check=True).stdout.split()


def test_the_package_zip_carries_bytecode_the_zip_importer_uses(tmp_path: Path) -> None:
    """``--py-files``: every module's source and its bytecode for this Python; a Python importing from the zip loads
    the bytecode (nothing compiled), and one that refuses it (as another version would) compiles the source."""
    import zipfile

    from laketide.lake.spark import package_zip

    target = package_zip(load_config(write_group_config(tmp_path, ["a"]), environ={}))
    names = set(zipfile.ZipFile(target).namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert "laketide/ingest/writer.py" in sources
    assert {n + "c" for n in sources} == names - sources
    where, compiled, loaded = _import_from(target)
    assert (where, compiled) == (f"{target}/laketide/ingest/runner.pyc", "0") and int(loaded) > 10

    stale = tmp_path / "stale.zip"
    with zipfile.ZipFile(target) as archive, zipfile.ZipFile(stale, "w") as copy:
        for name in archive.namelist():  # bytecode of another Python: another magic number
            data = archive.read(name)
            copy.writestr(name, b"\x00\x00" + data[2:] if name.endswith(".pyc") else data)
    where, compiled, loaded = _import_from(stale)
    assert where == f"{stale}/laketide/ingest/runner.py" and int(compiled) >= int(loaded) > 10
