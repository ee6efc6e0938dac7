"""Jar provisioning: real jarjar relocation, idempotent, clear errors, Maven override."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import laketide.lake.jars as jars
from laketide.config import load_config
from laketide.errors import JarsError
from laketide.lake.spark import spark_conf
from tests.helpers import write_config


def test_provision_builds_relocated_jackson_once(tmp_path: Path) -> None:
    built, changed = jars.provision(tmp_path)
    assert changed
    with zipfile.ZipFile(built.companion) as jar:
        names = set(jar.namelist())
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" in names
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper.class" in names
    assert not any(n.startswith("com/fasterxml/") for n in names)
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    again, changed = jars.provision(tmp_path)
    assert not changed and again == built
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before


def test_missing_piece_names_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jars, "JARJAR", tmp_path / "absent-jarjar.jar")
    with pytest.raises(JarsError, match="apt-get install libjarjar-java"):
        jars.provision(tmp_path / "out")
    with pytest.raises(JarsError, match="make jars"):
        jars.jar_set(tmp_path / "empty")


def test_maven_coordinates_replace_local_jars(tmp_path: Path) -> None:
    coords = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
    config = load_config(write_config(tmp_path), environ={"LAKETIDE__SPARK__PACKAGES": f"[{coords}]"})
    conf = spark_conf(config)
    assert conf["spark.jars.packages"] == coords
    assert "spark.jars" not in conf
    assert conf["spark.sql.catalog.laketide.type"] == "jdbc"


@pytest.mark.parametrize(("key", "given", "owned"), [
    ("spark.sql.legacy.timeParserPolicy", "EXCEPTION", "CORRECTED"),
    ("spark.sql.ansi.enabled", "true", "false"),
])
def test_the_parse_settings_are_laketides(tmp_path: Path, key: str, given: str, owned: str) -> None:
    """Two Spark settings turn a bad value of one line into an error that fails the whole batch, at every attempt:
    under the default time parser policy (EXCEPTION) a timestamp that the pre-3.0 parser takes and the stream's
    pattern refuses, and under ANSI mode an empty or malformed timestamp, a number that does not cast. Every laketide
    session reads such values as invalid instead (the line is rejected), whatever the configuration says
    (tests/test_parse.py feeds such values through the writer's parse: with ANSI mode on in the tests' session, four of
    its tests and tests/test_upsert.py's Debezium encoding test fail with the batch's error)."""
    config = load_config(write_config(tmp_path), environ={})
    settings = {**config.spark.conf, key: given}
    config = config.model_copy(update={"spark": config.spark.model_copy(update={"conf": settings})})
    assert spark_conf(config)[key] == owned
