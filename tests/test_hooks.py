"""The catalog hook: an Airflow connection wins over the YAML configuration; one catalog per process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from laketide.airflow.hooks import LaketideCatalogHook
from laketide.errors import ConfigError
from laketide.lake import catalog as catalog_module
from laketide.lake.catalog import load_catalog
from tests.helpers import load, write_config


def test_without_a_connection_the_yaml_catalog_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_LAKETIDE_CATALOG", raising=False)
    config = load(write_config(tmp_path))
    assert LaketideCatalogHook(config=config).catalog_config() == config.catalog


def test_the_connection_wins_over_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load(write_config(tmp_path))
    other = tmp_path / "other" / "catalog.db"
    monkeypatch.setenv("AIRFLOW_CONN_LAKETIDE_CATALOG", json.dumps({
        "conn_type": "sqlite", "host": str(other), "extra": {"warehouse": f"file://{tmp_path}/wh2"},
    }))
    hook = LaketideCatalogHook(config=config)
    resolved = hook.catalog_config()
    assert resolved.uri == f"sqlite:///{other}" and resolved.warehouse == f"file://{tmp_path}/wh2"
    assert resolved.name == config.catalog.name
    assert hook.spark_env()["LAKETIDE__CATALOG__URI"] == f"sqlite:///{other}"
    assert hook.laketide_config().catalog == resolved
    hook.get_conn().create_namespace("from_hook")
    assert ("from_hook",) in load_catalog(resolved).list_namespaces()

    monkeypatch.setenv("AIRFLOW_CONN_LAKETIDE_CATALOG", json.dumps({
        "conn_type": "postgres", "host": "db", "port": 5433, "schema": "lake", "login": "u", "password": "p",
    }))
    assert hook.catalog_config().uri == "postgresql+psycopg2://u:p@db:5433/lake"

    monkeypatch.setenv("AIRFLOW_CONN_LAKETIDE_CATALOG", json.dumps({"conn_type": "http", "host": "x"}))
    with pytest.raises(ConfigError, match="use a 'postgres' or 'sqlite' connection"):
        hook.catalog_config()


def test_one_catalog_per_process_and_setting(tmp_path: Path) -> None:
    config = load(write_config(tmp_path))
    before = catalog_module.constructions
    first = load_catalog(config.catalog)
    for _ in range(5):
        assert load_catalog(config.catalog) is first
    assert catalog_module.constructions == before + 1


def test_hooks_share_the_process_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every hook (each task, each sensor poke) gets the process's one catalog for the settings in force."""
    monkeypatch.delenv("AIRFLOW_CONN_LAKETIDE_CATALOG", raising=False)
    config = load(write_config(tmp_path))
    before = catalog_module.constructions
    first = LaketideCatalogHook(config=config).get_conn()
    assert all(LaketideCatalogHook(config=config).get_conn() is first for _ in range(5))
    assert load_catalog(config.catalog) is first
    assert catalog_module.constructions == before + 1
