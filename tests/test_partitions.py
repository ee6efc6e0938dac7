"""Partition status: the rules as plain functions, then scenarios over real tables written by the real writer,
with a controllable clock (``now``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from laketide.catalog import load_catalog
from laketide.config import StreamConfig
from laketide.partitions import Cursor, State, advance, check_partition, classify, enough_history, read
from laketide.reconcile import reconcile
from laketide.snapshots import Snap
from tests.helpers import STREAM_FIELDS
from tests.lake import Lake

P = datetime(2026, 11, 22, 3, tzinfo=UTC)
KEY = "2026-11-22T03:00:00+00:00"


def stream(**overrides: object) -> StreamConfig:
    base: dict[str, object] = {
        "name": "clicks", "landing_path": "/l", "checkpoint_path": "/c", "table": "lake.clicks",
        "rejects_table": "lake.clicks_rejects", "writer_id": "w", "event_time_field": "event_time",
        "event_id_field": "event_id", "fields": STREAM_FIELDS, "allowed_lateness": "10m", "idle_window": "5m",
    }
    return StreamConfig.model_validate({**base, **overrides})


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def seen(watermark: datetime | None, rows: int = 0, last_added: datetime | None = None,
         last_commit: datetime | None = None, since: datetime | None = None) -> Cursor:
    commit = last_commit or last_added or watermark
    return Cursor(KEY, snapshot_id=1, last_commit_ms=ms(commit) if commit else None,
                  watermark=watermark.isoformat() if watermark else None,
                  watermark_since_ms=ms(since or commit) if commit else None,
                  rows=rows, last_added_ms=ms(last_added) if last_added else None)


# -- the rules -------------------------------------------------------------------------------------------

def test_open_until_the_watermark_passes_end_plus_lateness() -> None:
    due = P + timedelta(hours=1, minutes=10)
    state, reason = classify(stream(), P, seen(due - timedelta(seconds=1), 10, P), due - timedelta(minutes=1))
    assert state == State.OPEN and "waiting for the watermark" in reason


def test_complete_needs_the_idle_window_after_the_last_rows() -> None:
    due = P + timedelta(hours=1, minutes=10)
    last = due + timedelta(minutes=1)
    cursor = seen(due, 10, last_added=last)
    assert classify(stream(), P, cursor, last + timedelta(minutes=4))[0] == State.OPEN
    state, reason = classify(stream(), P, cursor, last + timedelta(minutes=5))
    assert state == State.COMPLETE and "10 rows" in reason


def test_empty_when_the_watermark_passed_and_no_rows() -> None:
    due = P + timedelta(hours=1, minutes=10)
    state, _ = classify(stream(), P, seen(due + timedelta(minutes=30), 0, last_commit=due), due + timedelta(minutes=31))
    assert state == State.EMPTY


def test_lagging_writer_declares_nothing() -> None:
    due = P + timedelta(hours=1, minutes=10)
    behind = seen(due + timedelta(minutes=30), 0, last_commit=due)  # would be empty...
    now = due + timedelta(minutes=30) + timedelta(hours=2, seconds=1)  # ...but the writer is 2 periods behind
    state, reason = classify(stream(), P, behind, now)
    assert state == State.LAGGING and "behind" in reason
    stalled = seen(P + timedelta(minutes=50), 5, P + timedelta(minutes=50))
    assert classify(stream(), P, stalled, P + timedelta(hours=5))[0] == State.LAGGING  # not gap either


def test_gap_when_no_commit_for_the_idle_window() -> None:
    wm = P + timedelta(minutes=59)
    cursor = seen(wm, 100, last_added=wm, last_commit=P + timedelta(hours=1))
    due = P + timedelta(hours=1, minutes=10)
    assert classify(stream(), P, cursor, due - timedelta(seconds=1))[0] == State.OPEN  # not due yet
    state, reason = classify(stream(), P, cursor, due + timedelta(seconds=1))
    assert state == State.GAP and "no commit" in reason


def test_gap_when_commits_bring_no_new_events() -> None:
    wm = P + timedelta(minutes=59)
    due = P + timedelta(hours=1, minutes=10)
    # the writer keeps committing (e.g. only rejects) but the watermark is stuck since P+1h
    cursor = seen(wm, 100, last_added=wm, last_commit=due, since=P + timedelta(hours=1))
    state, reason = classify(stream(), P, cursor, due + timedelta(minutes=1))
    assert state == State.GAP and "no new events" in reason


def test_writer_not_started_waits_however_late_it_is() -> None:
    """No commit of the writer yet (it has not started, or its table does not exist): wait, never a gap; the
    sensor's timeout is what alerts when the writer never comes."""
    due = P + timedelta(hours=1, minutes=10)
    for now in (due - timedelta(minutes=1), due + timedelta(minutes=5), due + timedelta(days=2)):
        state, reason = classify(stream(), P, Cursor(KEY), now)
        assert state == State.OPEN and "waiting for the writer" in reason and "laketide_ingest_clicks" in reason
    # another writer's commits (e.g. a compaction, an old writer id) do not count as this writer's start
    other = advance(Cursor(KEY), [Snap(1, None, 1, ms(P), {"laketide.writer-id": "old", "laketide.watermark":
                                                           (P + timedelta(hours=5)).isoformat()})], "w")
    assert classify(stream(), P, other, due + timedelta(hours=1))[0] == State.OPEN


def test_once_the_writer_starts_the_hour_is_decided() -> None:
    due = P + timedelta(hours=1, minutes=10)
    started = due + timedelta(hours=1)  # the writer started long after the hour was due
    first = seen(started - timedelta(minutes=1), 0, last_commit=started)  # its watermark passed the hour: empty
    assert classify(stream(), P, first, started + timedelta(seconds=1))[0] == State.EMPTY
    rows = seen(started - timedelta(minutes=1), 7, last_added=started)  # it brought rows of the hour: complete
    assert classify(stream(), P, rows, started + timedelta(seconds=1))[0] == State.OPEN  # still arriving
    assert classify(stream(), P, rows, started + timedelta(minutes=5))[0] == State.COMPLETE


def test_writer_committing_only_rejects_is_a_gap_after_the_idle_window() -> None:
    due = P + timedelta(hours=1, minutes=10)

    def rejects_only(at: datetime) -> Snap:
        return Snap(ms(at), None, 1, ms(at), {"laketide.writer-id": "w"})  # a commit without a watermark

    cursor = advance(Cursor(KEY), [rejects_only(due - timedelta(minutes=2)), rejects_only(due)], "w")
    assert cursor.watermark is None and cursor.watermark_since_ms == ms(due - timedelta(minutes=2))
    assert classify(stream(), P, cursor, due - timedelta(minutes=1))[0] == State.OPEN  # not due yet
    assert classify(stream(), P, cursor, due + timedelta(minutes=2))[0] == State.OPEN  # within the idle window
    state, reason = classify(stream(), P, cursor, due + timedelta(minutes=3))
    assert state == State.GAP and "no valid event" in reason


def test_advance_counts_only_this_writer_and_this_partition() -> None:
    def snap(i: int, writer: str, rows: dict[str, int], wm: str) -> Snap:
        summary = {"laketide.writer-id": writer, "laketide.watermark": wm,
                   "laketide.partition-rows": json.dumps(rows)}
        return Snap(i, i - 1, i, 1_000 * i, summary)

    cursor = advance(Cursor(KEY), [
        snap(1, "w", {KEY: 5, "2026-11-22T04:00:00+00:00": 2}, "2026-11-22T04:01:00+00:00"),
        snap(2, "other", {KEY: 100}, "2026-11-22T09:00:00+00:00"),
        snap(3, "w", {"2026-11-22T04:00:00+00:00": 3}, "2026-11-22T04:01:00+00:00"),
        Snap(4, 3, 4, 4_000, {"operation": "replace"}),  # compaction: no marker
    ], "w")
    assert cursor == Cursor(KEY, snapshot_id=4, last_commit_ms=3_000, watermark="2026-11-22T04:01:00+00:00",
                            watermark_since_ms=1_000, rows=5, last_added_ms=1_000)


def test_first_check_stops_at_an_old_commit_whose_watermark_is_before_the_partition() -> None:
    now = P + timedelta(hours=2)
    stop = enough_history(stream(idle_window="5m"), P, now)

    def commit(at: datetime, watermark: str | None, writer: str = "w") -> Snap:
        summary = {"laketide.writer-id": writer} | ({"laketide.watermark": watermark} if watermark else {})
        return Snap(1, None, 1, ms(at), summary)

    old = now - timedelta(minutes=6)
    assert stop(commit(old, "2026-11-22T02:59:59.999999+00:00"))
    assert stop(commit(old, None))  # no valid row committed yet
    assert not stop(commit(old, "2026-11-22T03:00:00+00:00"))  # may hold rows of the partition
    assert not stop(commit(now - timedelta(minutes=4), "2026-11-22T01:00:00+00:00"))  # inside the idle window
    assert not stop(commit(old, "2026-11-22T01:00:00+00:00", writer="other"))


def test_bad_partition_is_refused(lake: Lake) -> None:
    with pytest.raises(ValueError, match="UTC hour start"):
        check_partition(lake.config, lake.stream, P.replace(minute=30))


def test_table_not_created_yet_waits_not_a_gap(lake: Lake) -> None:
    """Before the writer's first batch the table does not exist: wait (naming the table), however late it is."""
    missing = lake.stream.model_copy(update={"table": "lake.not_yet"})
    due = P + timedelta(hours=1, minutes=10)
    for now in (due, due + timedelta(minutes=10), due + timedelta(days=1)):
        status, cursor = check_partition(lake.config, missing, P, now=now)
        assert status.state == State.OPEN and not status.decided
        assert "'lake.not_yet' does not exist" in status.reason and "waiting for the writer" in status.reason
        assert cursor == Cursor(KEY)


# -- scenarios over the real lake ----------------------------------------------------------------------------

def lake_rows(lake: Lake) -> dict[str, int]:
    return {p.partition: p.lake for p in reconcile(lake.config, lake.stream).partitions}


def test_normal_hour_is_complete_with_its_late_rows(lake: Lake) -> None:
    p = lake.hours[0]
    just_after = lake.written_at
    status, cursor = check_partition(lake.config, lake.stream, p, now=just_after)
    assert status.state == State.OPEN and "rows still arriving" in status.reason
    status, _ = check_partition(lake.config, lake.stream, p, now=just_after + timedelta(seconds=3))
    assert status.state == State.COMPLETE, status.reason
    # every row of the hour, including late events that arrived with the next hour's files
    assert status.rows == lake_rows(lake)[lake.key(0)] > 0
    # the incremental cursor gives the same answer as a cold read
    again, cursor2 = check_partition(lake.config, lake.stream, p, now=just_after + timedelta(seconds=3),
                                     cursor=cursor)
    assert (again.state, again.rows, cursor2) == (status.state, status.rows, cursor)


def test_quiet_hour_is_empty_not_gap(lake: Lake) -> None:
    status, _ = check_partition(lake.config, lake.stream, lake.hours[1], now=lake.written_at)
    assert status.state == State.EMPTY and status.rows == 0
    assert lake.key(1) not in lake_rows(lake)


def test_stalled_producer_is_a_gap(lake: Lake) -> None:
    # nothing landed after the last hour: once its end + lateness has passed and nothing came for the idle
    # window, the hour is a gap, not complete and not empty
    last = lake.hours[3]
    due = last + timedelta(hours=1, minutes=10)
    status, _ = check_partition(lake.config, lake.stream, last, now=max(lake.written_at, due) + timedelta(seconds=4))
    assert status.state == State.GAP, status.reason
    assert "stalled" in status.reason
    before_due, _ = check_partition(lake.config, lake.stream, last, now=due - timedelta(minutes=1))
    assert before_due.state == State.OPEN


def test_far_behind_writer_is_lagging_and_nothing_is_empty(lake: Lake) -> None:
    watermark = datetime.fromisoformat(check_partition(lake.config, lake.stream, lake.hours[1])[0].watermark or "")
    later = watermark + timedelta(hours=2, minutes=1)  # the clock moved on, the writer did not
    for hour in lake.hours:
        status, _ = check_partition(lake.config, lake.stream, hour, now=later)
        assert status.state == State.LAGGING, (hour, status.reason)


def test_warm_read_equals_cold_read(lake: Lake) -> None:
    catalog = load_catalog(lake.config.catalog)
    cold = read(catalog, lake.stream, lake.hours[0], lake.written_at)
    warm = read(catalog, lake.stream, lake.hours[0], lake.written_at, cold)
    assert warm == cold
    with pytest.raises(ValueError, match="cursor is for partition"):
        read(catalog, lake.stream, lake.hours[1], lake.written_at, cold)
