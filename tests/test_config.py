from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from laketide.catalog import jdbc_properties
from laketide.config import DEFAULT_CONFIG, load_config, parse_duration
from laketide.errors import ConfigError
from tests.helpers import STREAM_FIELDS, write_config


def test_default_configuration_loads() -> None:
    config = load_config(DEFAULT_CONFIG, environ={})
    stream = config.stream("clicks")
    assert stream.table == "lake.clicks"
    assert stream.partition_period == "hour"
    assert config.catalog.uri.startswith("sqlite:////")  # {home} expanded to an absolute path
    assert str(config.home) in str(stream.landing_path)


def test_env_overrides_catalog_and_stream_keys(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    env = {
        "LAKETIDE__CATALOG__URI": "postgresql+psycopg2://lake:s%40cret@db.example:6543/lake",
        "LAKETIDE__STREAMS__CLICKS__TRIGGER_INTERVAL": "45s",
        "LAKETIDE__STREAMS__CLICKS__ALLOWED_LATENESS": "1h",
    }
    config = load_config(path, environ=env)
    assert config.stream("clicks").trigger_interval == timedelta(seconds=45)
    assert config.stream("clicks").allowed_lateness == timedelta(hours=1)
    props = jdbc_properties(config.catalog)
    assert props["uri"] == "jdbc:postgresql://db.example:6543/lake"
    assert props["jdbc.user"] == "lake" and props["jdbc.password"] == "s@cret"


def test_sqlite_jdbc_uri_has_wal_and_busy_timeout(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path), environ={})
    uri = jdbc_properties(config.catalog)["uri"]
    assert uri == f"jdbc:sqlite:{tmp_path}/catalog.db?journal_mode=WAL&busy_timeout=30000"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"trigger_interval": "soon"}, "streams.0.trigger_interval"),
        ({"table": "no_namespace"}, "streams.0.table"),
        ({"event_time_field": "nope"}, "event_time_field 'nope' is not one of fields"),
        ({"partition_period": "day"}, "streams.0.partition_period"),
        ({"unknown_key": 1}, "streams.0.unknown_key"),
        ({"writer_id": "has space"}, "streams.0.writer_id"),
        ({"fields": {**STREAM_FIELDS, "_batch_id": {"type": "long"}}}, "field name '_batch_id' starts with '_'"),
    ],
)
def test_bad_setting_names_the_key(tmp_path: Path, overrides: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write_config(tmp_path, **overrides), environ={})
    assert named in str(err.value)


def test_missing_required_key_is_named(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    del raw["streams"][0]["rejects_table"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"streams\.0\.rejects_table: Field required"):
        load_config(path, environ={})


def test_missing_file_and_unknown_stream(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "absent.yaml", environ={})
    config = load_config(write_config(tmp_path), environ={})
    with pytest.raises(ConfigError, match=r"unknown stream 'views'.*\['clicks'\]"):
        config.stream("views")
    with pytest.raises(ConfigError, match="no stream named 'views'"):
        load_config(write_config(tmp_path), environ={"LAKETIDE__STREAMS__VIEWS__WRITER_ID": "x"})


def test_parse_duration() -> None:
    assert parse_duration("30s") == timedelta(seconds=30)
    assert parse_duration("10 minutes") == timedelta(minutes=10)
    assert parse_duration(90) == timedelta(seconds=90)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("ten")
