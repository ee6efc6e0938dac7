from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from laketide.config import DEFAULT_CONFIG, load_config, parse_duration
from laketide.errors import ConfigError
from laketide.lake.catalog import jdbc_properties
from tests.helpers import ACCOUNT_FIELDS, ACCOUNT_UPSERT, STREAM_FIELDS, write_config


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
        ({"trigger_interval": "soon"}, "streams[clicks].trigger_interval: not a duration"),
        ({"table": "no_namespace"}, "streams[clicks].table"),
        ({"event_time_field": "nope"}, "streams[clicks].event_time_field: 'nope' is not one of fields"),
        ({"event_id_field": "event_time"}, "streams[clicks].event_id_field: must be another field"),
        ({"rejects_table": "lake.clicks"}, "streams[clicks].rejects_table: 'lake.clicks' is also the events table"),
        ({"partition_period": "day"}, "streams[clicks].partition_period"),
        ({"unknown_key": 1}, "streams[clicks].unknown_key"),
        ({"writer_id": "has space"}, "streams[clicks].writer_id"),
        ({"fields": {**STREAM_FIELDS, "_batch_id": {"type": "long"}}}, "field name '_batch_id' starts with '_'"),
        # durations: negative or zero numbers and strings, infinite, too large
        ({"trigger_interval": -5}, "streams[clicks].trigger_interval: must be a positive duration, not -5"),
        ({"trigger_interval": 0}, "streams[clicks].trigger_interval: must be a positive duration"),
        ({"trigger_interval": "0s"}, "streams[clicks].trigger_interval: must be a positive duration"),
        ({"trigger_interval": "-5s"}, "streams[clicks].trigger_interval: must be a positive duration, not '-5s'"),
        ({"idle_window": -60.0}, "streams[clicks].idle_window: must be a positive duration"),
        ({"max_future": 0}, "streams[clicks].max_future: must be a positive duration"),
        ({"allowed_lateness": -1}, "streams[clicks].allowed_lateness: must not be negative"),
        ({"trigger_interval": float("inf")}, "streams[clicks].trigger_interval: not a duration"),
        ({"trigger_interval": "99999999999 days"},
         "streams[clicks].trigger_interval: duration '99999999999 days' is out of range"),
        ({"trigger_interval": True}, "streams[clicks].trigger_interval: not a duration"),
        # timing that cannot work, paths that cannot be shared
        ({"trigger_interval": "1m", "idle_window": "30s"},
         "streams[clicks].idle_window: 30s is not longer than trigger_interval (1m)"),
        ({"checkpoint_path": "{home}/landing/clicks/_checkpoint"},
         "streams[clicks].checkpoint_path: '{home}/landing/clicks/_checkpoint' overlaps landing_path"),
        ({"checkpoint_path": "{home}/landing/clicks"}, "streams[clicks].checkpoint_path:"),
        ({"landing_path": "{home}/checkpoints/clicks/landing"}, "streams[clicks].checkpoint_path:"),
        ({"landing_path": "{home}/warehouse"},
         "streams[clicks].landing_path: '{home}/warehouse' overlaps the warehouse"),
        ({"landing_path": "{home}/warehouse/lake/in"}, "streams[clicks].landing_path:"),
        ({"checkpoint_path": "{home}/warehouse/lake/clicks/_checkpoint"},
         "streams[clicks].checkpoint_path: '{home}/warehouse/lake/clicks/_checkpoint' is inside the warehouse"),
        ({"landing_path": "landing/clicks"}, "streams[clicks].landing_path: 'landing/clicks' is a relative path"),
        ({"min_event_time": "yesterday"}, "streams[clicks].min_event_time: 'yesterday' is not an ISO timestamp"),
        ({"min_event_time": "2000-01-01T00:00:00"}, "streams[clicks].min_event_time: '2000-01-01T00:00:00' has no UTC"),
        # a lease the writer's loop (about once a second) cannot keep; clock skew and file age
        ({"writer_lease": "1s"}, "streams[clicks].writer_lease: 1s is too short"),
        ({"writer_lease": "4s"}, "use at least 5s"),
        ({"max_clock_skew": "2d"}, "streams[clicks].max_clock_skew: 2d is longer than max_future (1d)"),
        ({"max_clock_skew": 0}, "streams[clicks].max_clock_skew: must be a positive duration"),
        ({"max_file_age": "10m"}, "streams[clicks].max_file_age: 10m is shorter than an hour"),
    ],
)
def test_bad_setting_names_the_key(tmp_path: Path, overrides: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write_config(tmp_path, **overrides), environ={})
    assert named.replace("{home}", str(tmp_path)) in str(err.value)


def test_negative_override_from_the_environment_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"streams\[clicks\]\.trigger_interval: must be a positive duration"):
        load_config(write_config(tmp_path), environ={"LAKETIDE__STREAMS__CLICKS__TRIGGER_INTERVAL": "-5"})


@pytest.mark.parametrize(
    ("close", "named"),
    [
        ({"poke_interval": 0}, "close.poke_interval: must be a positive duration"),
        ({"sensor_timeout": "-1h"}, "close.sensor_timeout: must be a positive duration, not '-1h'"),
        ({"sensor_timeout": -3600}, "close.sensor_timeout: must be a positive duration"),
        ({"poke_interval": "5m", "sensor_timeout": "1m"},
         "close.sensor_timeout: 1m is not longer than poke_interval (5m)"),
        ({"status_table": "lake.clicks"}, "close.status_table: 'lake.clicks' is the table of stream 'clicks'"),
        ({"results_dir": "{home}/landing/clicks/gx"}, "close.results_dir: '{home}/landing/clicks/gx' is inside"),
        ({"results_dir": "{home}/warehouse/gx"}, "close.results_dir: '{home}/warehouse/gx' is inside the warehouse"),
    ],
)
def test_bad_close_setting_names_the_key(tmp_path: Path, close: dict[str, object], named: str) -> None:
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["close"] = close
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert named.replace("{home}", str(tmp_path)) in str(err.value)


def test_warehouse_inside_a_landing_zone_is_refused(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["catalog"]["warehouse"] = "file://{home}/landing/clicks/warehouse"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"streams\[clicks\]\.landing_path: .* overlaps the warehouse"):
        load_config(path, environ={})
    raw["catalog"]["warehouse"] = "s3://bucket/warehouse"  # remote storage: nothing local to compare
    path.write_text(yaml.safe_dump(raw))
    assert load_config(path, environ={}).catalog.warehouse == "s3://bucket/warehouse"


def two_streams(tmp_path: Path, **views: object) -> Path:
    """The test configuration plus a stream 'views' with its own folders, tables and writer id, then ``views``."""
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["streams"].append({
        **raw["streams"][0], "name": "views", "landing_path": "{home}/landing/views",
        "checkpoint_path": "{home}/checkpoints/views", "table": "lake.views", "rejects_table": "lake.views_rejects",
        "writer_id": "views-writer", **views,
    })
    path.write_text(yaml.safe_dump(raw))
    return path


def test_two_streams_with_their_own_keys_load(tmp_path: Path) -> None:
    assert [s.name for s in load_config(two_streams(tmp_path), environ={}).streams] == ["clicks", "views"]


@pytest.mark.parametrize(
    ("views", "named"),
    [
        ({"writer_id": "clicks-writer"},
         "streams[views].writer_id: 'clicks-writer' is already the writer_id of stream 'clicks'"),
        ({"table": "lake.clicks"}, "streams[views].table: 'lake.clicks' is already the table of stream 'clicks'"),
        ({"rejects_table": "lake.clicks"}, "streams[views].rejects_table: 'lake.clicks' is already the table"),
        ({"name": "clicks"}, "streams[1].name: stream name 'clicks' is used twice"),
        ({"landing_path": "{home}/landing/clicks"},
         "streams[views].landing_path: '{home}/landing/clicks' overlaps the landing zone of stream 'clicks'"),
        ({"landing_path": "{home}/landing/clicks/views"}, "streams[views].landing_path:"),
        ({"landing_path": "{home}/landing"}, "streams[views].landing_path:"),
        ({"checkpoint_path": "{home}/checkpoints/clicks"},
         "streams[views].checkpoint_path: '{home}/checkpoints/clicks' overlaps the checkpoint of stream 'clicks'"),
        ({"checkpoint_path": "{home}/landing/clicks/views-checkpoint"},
         "overlaps the landing zone of stream 'clicks'"),
    ],
)
def test_streams_sharing_a_key_are_refused(tmp_path: Path, views: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(two_streams(tmp_path, **views), environ={})
    assert named.replace("{home}", str(tmp_path)) in str(err.value)


def two_upsert_streams(home: Path, views_table: str) -> Path:
    """Two upsert streams: clicks merged into lake.accounts, views into ``views_table``."""
    def upsert(table: str) -> dict[str, object]:
        return {"fields": ACCOUNT_FIELDS, "event_time_field": "changed_at", "event_id_field": "change_id",
                "upsert": {**ACCOUNT_UPSERT, "table": table}}

    path = two_streams(home, **upsert(views_table))
    raw = yaml.safe_load(path.read_text())
    raw["streams"][0].update(upsert("lake.accounts"))
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(("views_table", "named"), [
    ("lake.accounts", "streams[views].upsert.table: 'lake.accounts' is already the upsert.table of stream 'clicks'"),
    ("lake.clicks", "streams[views].upsert.table: 'lake.clicks' is already the table of stream 'clicks'"),
    ("lake.accounts__tombstones",
     "streams[views].upsert.table: 'lake.accounts__tombstones' is already the tombstones table of stream 'clicks'"),
])
def test_upsert_streams_sharing_a_merged_table_are_refused(tmp_path: Path, views_table: str, named: str) -> None:
    """Two streams merged into one table would each fold its own changes over the other's rows: no fold holds."""
    with pytest.raises(ConfigError) as err:
        load_config(two_upsert_streams(tmp_path, views_table), environ={})
    assert named in str(err.value)
    config = load_config(two_upsert_streams(tmp_path, "lake.other_accounts"), environ={})
    assert [s.upsert.table for s in config.streams if s.upsert] == ["lake.accounts", "lake.other_accounts"]


def test_every_problem_is_listed(tmp_path: Path) -> None:
    path = two_streams(tmp_path, writer_id="clicks-writer", checkpoint_path="{home}/checkpoints/clicks")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    lines = str(err.value).splitlines()[1:]
    assert [line.split(":")[0] for line in lines] == ["  - streams[views].writer_id",
                                                      "  - streams[views].checkpoint_path"]


def test_missing_required_key_is_named(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    del raw["streams"][0]["rejects_table"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"streams\[clicks\]\.rejects_table: Field required"):
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
    assert parse_duration(-5) == timedelta(seconds=-5)  # the sign is checked by the keys that need one


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        # as written, however the unit was spelt, not converted to seconds
        ({"max_file_age": "7d", "source_log_retention": "72 hours"},
         "streams[clicks].source_log_retention: 72 hours is shorter than max_file_age (7d)"),
        ({"max_file_age": "45m"}, "streams[clicks].max_file_age: 45m is shorter than an hour"),
        ({"trigger_interval": 90, "idle_window": 60}, "streams[clicks].idle_window: 60s is not longer than "
                                                       "trigger_interval (90s)"),
        # a built-in default as its largest whole unit
        ({"max_clock_skew": "36h"}, "streams[clicks].max_clock_skew: 36h is longer than max_future (1d)"),
        # a negative duration is a duration, and said to be the wrong sign
        ({"allowed_lateness": "-5m"}, "streams[clicks].allowed_lateness: must not be negative: '-5m'"),
        ({"idle_window": "-5m"}, "streams[clicks].idle_window: must be a positive duration, not '-5m'"),
        ({"idle_window": "- 2 hours"}, "streams[clicks].idle_window: must be a positive duration, not '- 2 hours'"),
    ],
)
def test_duration_errors_quote_the_value_as_written(tmp_path: Path, overrides: dict[str, object],
                                                    named: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write_config(tmp_path, **overrides), environ={})
    assert named in str(err.value)
    assert "not a duration" not in str(err.value)


def test_as_written() -> None:
    from laketide.config.values import as_written

    assert [as_written(parse_duration(v)) for v in ("7d", "60d", "10m", " 10 minutes ", 90, 1.5)] == [
        "7d", "60d", "10m", "10 minutes", "90s", "1.5s"]
    assert [as_written(timedelta(seconds=s)) for s in (86400, 5400, 600, 90, 0.25, -300)] == [
        "1d", "90m", "10m", "90s", "0.25s", "-5m"]
    assert parse_duration("-5m") == timedelta(minutes=-5) and parse_duration("+1h") == timedelta(hours=1)
