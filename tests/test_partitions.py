"""Partition status: the rules as plain functions, then scenarios over real tables written by the real writer,
with a controllable clock (``now``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.partitions import (
    Backlog,
    Cursor,
    State,
    advance,
    backlog,
    check_partition,
    check_partitions,
    classify,
    enough_history,
    read,
    uncommitted,
)
from laketide.close.reconcile import reconcile
from laketide.config import StreamConfig
from laketide.lake.catalog import load_catalog
from laketide.lake.snapshots import Snap
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


def test_complete_as_soon_as_the_watermark_passes_and_nothing_waits() -> None:
    """Completeness is an event-time question: no wall-clock wait once the watermark passed end + lateness."""
    due = P + timedelta(hours=1, minutes=10)
    cursor = seen(due, 10, last_added=due)
    state, reason = classify(stream(), P, cursor, due)
    assert state == State.COMPLETE and "10 rows" in reason
    # files of later hours waiting do not hold the hour back: they cannot hold its events (one hour a file)
    assert classify(stream(), P, cursor, due, Backlog(later=3))[0] == State.COMPLETE


def test_a_live_hour_is_not_declared_before_the_wall_clock_passed_end_plus_lateness() -> None:
    """Whatever the event times say: a watermark far ahead (a producer's fast clock) declares nothing early for a
    live stream; a replay (live: false) still closes by event time; a producer ahead is named."""
    due = P + timedelta(hours=1, minutes=10)
    at = ms(P + timedelta(minutes=20))
    ahead = Cursor(KEY, snapshot_id=1, last_commit_ms=at, watermark=(P + timedelta(hours=3)).isoformat(),
                   watermark_since_ms=at, rows=10, last_added_ms=at,
                   ahead={"fast": (P + timedelta(hours=3)).isoformat()})
    for now in (P + timedelta(minutes=21), due - timedelta(seconds=1)):
        state, reason = classify(stream(), P, ahead, now)
        assert state == State.OPEN and "wall clock has passed its end + allowed_lateness too" in reason, reason
        assert "producer clock ahead: fast (events up to 2026-11-22T06:00:00+00:00)" in reason
    assert classify(stream(), P, ahead, due)[0] == State.COMPLETE
    assert classify(stream(live=False), P, ahead, P + timedelta(minutes=21))[0] == State.COMPLETE


def test_the_watermark_is_capped_at_the_writers_clock() -> None:
    from laketide.ingest.summary import ahead_of_clock, watermark_after

    now, skew = P + timedelta(minutes=20), timedelta(minutes=5)
    capped = watermark_after("2026-11-22T03:10:00+00:00", P + timedelta(hours=3), now, skew)
    assert capped == (now + skew).isoformat()
    # a replay's old events are never capped, and the watermark never goes down
    assert watermark_after(None, P - timedelta(days=30), now, skew) == (P - timedelta(days=30)).isoformat()
    assert watermark_after(capped, P, now, skew) == capped and watermark_after(capped, None, now, skew) == capped
    latest = {"20261122T06-fast-00000001-0123abcd.jsonl": P + timedelta(hours=3),
              "20261122T06-fast-00000002-0123abcd.jsonl": P + timedelta(hours=3, minutes=1),
              "20261122T03-ok-00000001-0123abcd.jsonl": now + timedelta(minutes=4),
              "odd.jsonl": now + timedelta(hours=1)}
    assert ahead_of_clock(latest, now, skew) == {"fast": "2026-11-22T06:01:00+00:00",
                                                 "odd.jsonl": "2026-11-22T04:20:00+00:00"}


def test_empty_when_the_watermark_passed_and_no_rows() -> None:
    due = P + timedelta(hours=1, minutes=10)
    state, _ = classify(stream(), P, seen(due + timedelta(minutes=30), 0, last_commit=due), due + timedelta(minutes=31))
    assert state == State.EMPTY


def test_backlog_of_the_hour_or_earlier_is_lagging_not_gap() -> None:
    """Landed files of the hour (or older) not committed yet: nothing is declared, however late it is and
    whether or not the writer still commits; the rule holds for a watermark that passed the hour too."""
    due = P + timedelta(hours=1, minutes=10)
    waiting = Backlog(pending=("20261122T03-a-00000001-0badf00d.jsonl", "b.jsonl"), last_landed_ms=ms(P))
    for cursor in (seen(due + timedelta(minutes=30), 7, last_added=due),  # would be complete
                   seen(due + timedelta(minutes=30), 0, last_commit=due),  # would be empty
                   seen(P + timedelta(minutes=50), 5, P + timedelta(minutes=50))):  # would be a gap
        for now in (due + timedelta(minutes=31), due + timedelta(days=3)):
            state, reason = classify(stream(), P, cursor, now, waiting)
            assert state == State.LAGGING, reason
            assert "backlog: 2 landed file(s)" in reason and "20261122T03-a-00000001-0badf00d.jsonl" in reason


def test_stopped_writer_with_a_backlog_of_later_files_is_lagging_not_gap() -> None:
    due = P + timedelta(hours=1, minutes=10)
    cursor = seen(P + timedelta(minutes=50), 5, P + timedelta(minutes=50), last_commit=P + timedelta(hours=1))
    behind = Backlog(later=4, last_landed_ms=ms(P + timedelta(hours=1, minutes=5)))
    for now in (due + timedelta(minutes=10), due + timedelta(hours=5)):
        state, reason = classify(stream(), P, cursor, now, behind)
        assert state == State.LAGGING and "4 landed file(s) of later hours" in reason, reason
    # a writer still committing through that backlog: the hour waits for the watermark
    busy = seen(P + timedelta(minutes=50), 5, P + timedelta(minutes=50), last_commit=due + timedelta(minutes=9),
                since=due + timedelta(minutes=9))
    assert classify(stream(), P, busy, due + timedelta(minutes=10), behind)[0] == State.OPEN


def test_a_stall_stays_a_gap_however_long_it_lasts() -> None:
    due = P + timedelta(hours=1, minutes=10)
    last = P + timedelta(minutes=59)
    cursor = seen(last, 100, last_added=last, last_commit=P + timedelta(hours=1))
    landing = Backlog(last_landed_ms=ms(P + timedelta(minutes=59, seconds=30)))
    for after in (timedelta(seconds=1), timedelta(hours=3, minutes=1), timedelta(hours=30), timedelta(days=40)):
        state, reason = classify(stream(), P, cursor, due + after, landing)
        assert state == State.GAP and "stalled" in reason, (after, reason)
    # a stall that began less than the idle window ago: not a gap yet
    just = seen(last, 100, last_added=due - timedelta(minutes=2), since=due - timedelta(minutes=2))
    recent = Backlog(last_landed_ms=ms(due - timedelta(minutes=2)))
    assert classify(stream(), P, just, due + timedelta(minutes=1), recent)[0] == State.OPEN
    assert classify(stream(), P, just, due + timedelta(minutes=3), recent)[0] == State.GAP


def test_replay_of_old_hours_closes_them_in_event_time_order() -> None:
    """Years-old data replayed: each hour the watermark passed closes complete or empty, with the real clock or
    a clock just after the data (commit times are real, event times are old: the two are never compared)."""
    old = datetime(2012, 3, 5, 22, tzinfo=UTC)
    key = old.isoformat()
    committed = datetime(2026, 11, 22, 18, 0, tzinfo=UTC)  # when the replay's writer committed

    def at(watermark: datetime, rows: int) -> Cursor:
        return Cursor(key, snapshot_id=1, last_commit_ms=ms(committed), watermark=watermark.isoformat(),
                      watermark_since_ms=ms(committed), rows=rows, last_added_ms=ms(committed) if rows else None)

    history = stream(live=False)
    for s in (stream(), history):
        for now in (committed + timedelta(seconds=1), committed + timedelta(days=30), old + timedelta(hours=3)):
            assert classify(s, old, at(old + timedelta(hours=4), 250), now)[0] == State.COMPLETE
            assert classify(s, old, at(old + timedelta(hours=4), 0), now)[0] == State.EMPTY
            # while the watermark is inside the hour it waits, however old the hour is
            assert classify(s, old, at(old + timedelta(minutes=40), 90), now, Backlog(
                last_landed_ms=ms(committed)))[0] == State.OPEN or now > committed + timedelta(minutes=5)
    # the end of the replay: the input is idle (nothing landed or committed for the idle window) and caught up
    later = committed + timedelta(minutes=6)
    landing = Backlog(last_landed_ms=ms(committed - timedelta(minutes=1)))
    last_hour = at(old + timedelta(minutes=40), 90)
    assert classify(history, old, last_hour, committed + timedelta(minutes=2), landing)[0] == State.OPEN  # not idle yet
    state, reason = classify(history, old, last_hour, later, landing)
    assert state == State.COMPLETE and "the input ended" in reason, reason
    # a quiet hour whose end the watermark reached but not end + lateness: empty
    assert classify(history, old, at(old + timedelta(hours=1, minutes=5), 0), later, landing)[0] == State.EMPTY
    # an hour after the watermark was not in the replay: it waits for data
    state, reason = classify(history, old + timedelta(hours=1), last_hour, later, landing)
    assert state == State.OPEN and "waiting for its data" in reason
    # a live stream cannot tell the end of a replay from a dead source: gap, with a hint
    state, reason = classify(stream(), old, last_hour, later, landing)
    assert state == State.GAP and "live: false" in reason


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
    assert classify(stream(), P, rows, started + timedelta(seconds=1))[0] == State.COMPLETE


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
    """... and which was made more than max_future (1 day here) before the partition: a younger commit, whatever
    its watermark, may follow older ones that hold rows of the hour ahead of their watermark (a fast clock)."""
    now = P + timedelta(hours=2)
    stop = enough_history(stream(idle_window="5m", max_future="1d"), P, now)

    def commit(at: datetime, watermark: str | None, writer: str = "w") -> Snap:
        summary = {"laketide.writer-id": writer} | ({"laketide.watermark": watermark} if watermark else {})
        return Snap(1, None, 1, ms(at), summary)

    old = P - timedelta(days=1, minutes=1)
    assert stop(commit(old, "2026-11-21T02:59:59.999999+00:00"))
    assert stop(commit(now - timedelta(minutes=6), None))  # no valid row committed yet, by it or before it
    assert not stop(commit(old, "2026-11-22T03:00:00+00:00"))  # may hold rows of the partition
    assert not stop(commit(now - timedelta(minutes=6), "2026-11-22T02:59:59.999999+00:00"))  # see the docstring
    assert not stop(commit(P - timedelta(hours=3), "2026-11-22T00:05:00+00:00"))  # within max_future of the hour
    assert not stop(commit(now - timedelta(minutes=4), "2026-11-22T01:00:00+00:00"))  # inside the idle window
    assert not stop(commit(old, "2026-11-22T01:00:00+00:00", writer="other"))


def test_a_first_check_counts_the_rows_a_commit_holds_ahead_of_its_capped_watermark(tmp_path: Path) -> None:
    """A producer's clock three hours fast: its 20 rows of a later hour are committed with a watermark capped at
    the writer's clock + max_clock_skew, before that hour; later commits of earlier hours follow. The first check
    of that hour (at its end, from metadata: the commits' summaries) counts the 20 rows, not 0, and the earlier
    hour's own rows too."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("lake")
    schema = pa.schema([pa.field("event_id", pa.string())])
    table = catalog.create_table("lake.clicks", schema)
    clock = datetime.now(UTC)
    this_hour = clock.replace(minute=0, second=0, microsecond=0)
    ahead = this_hour + timedelta(hours=3)
    capped = (clock + timedelta(minutes=5)).isoformat()

    def commit(batch: int, rows: dict[datetime, int], producer_ahead: bool = False) -> None:
        props = {"laketide.writer-id": "w", "laketide.batch-id": str(batch), "laketide.watermark": capped,
                 "laketide.partition-rows": json.dumps({h.isoformat(): n for h, n in rows.items()})}
        if producer_ahead:
            props["laketide.ahead-of-clock"] = json.dumps({"fast-producer": (ahead + timedelta(minutes=9)).isoformat()})
        table.append(pa.Table.from_pylist([{"event_id": f"{batch}-{i}"} for i in range(sum(rows.values()))],
                                          schema=schema), snapshot_properties=props)

    commit(0, {ahead: 20}, producer_ahead=True)
    commit(1, {this_hour: 3})
    commit(2, {this_hour: 2})
    config = stream(max_future="1d", max_clock_skew="5m")
    due = ahead + timedelta(hours=1, minutes=11)  # every commit is older than the idle window
    seen = read(catalog, config, ahead, due)
    assert seen.rows == 20 and seen.watermark == capped and "fast-producer" in seen.ahead
    assert read(catalog, config, this_hour, due).rows == 5
    catalog.engine.dispose()


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
    assert status.state == State.COMPLETE, status.reason  # no wall-clock wait once the watermark passed
    # every row of the hour, including late events that arrived with the next hour's files
    assert status.rows == lake_rows(lake)[lake.key(0)] > 0
    # the incremental cursor gives the same answer as a cold read
    again, cursor2 = check_partition(lake.config, lake.stream, p, now=just_after, cursor=cursor)
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


def test_long_stall_stays_a_gap_and_older_hours_stay_decided(lake: Lake) -> None:
    last = lake.hours[3]
    much_later = last + timedelta(hours=1, minutes=10) + timedelta(hours=3, minutes=30)  # more than three periods
    states = [check_partition(lake.config, lake.stream, hour, now=much_later)[0].state for hour in lake.hours]
    assert states == [State.COMPLETE, State.EMPTY, State.COMPLETE, State.GAP]


def test_landed_file_not_committed_is_a_backlog(lake: Lake) -> None:
    """A file of the first hour lands after everything was committed: that hour and every later one lag (nothing
    of them or earlier may be declared) until the writer commits it; it is read from the listing alone."""
    from laketide.ingest.landing import audit_dir, audit_name, publish

    line = json.dumps({"event_id": "late-1", "event_time": (lake.hours[0] + timedelta(minutes=5)).isoformat(),
                       "user_id": 1, "page": "/"})
    path = publish(lake.stream.landing_path, [line], lake.key(0), "late", 0, "clicks")
    try:
        for i, hour in enumerate(lake.hours):
            status, _ = check_partition(lake.config, lake.stream, hour, now=lake.written_at + timedelta(hours=6))
            assert status.state == State.LAGGING and path.name in status.reason, (i, status.reason)
    finally:
        path.unlink()
        (audit_dir(lake.stream.landing_path) / audit_name(path.name)).unlink()


def test_uncommitted_walks_back_only_as_far_as_the_files_need(monkeypatch: pytest.MonkeyPatch) -> None:
    from laketide.ingest import backlog as partitions  # the backlog walk lives in the ingest stage
    from laketide.ingest.inspection import Landed

    def commit(i: int, at: int, files: dict[str, int]) -> Snap:
        summary = {"laketide.writer-id": "w", "laketide.source-files": json.dumps(sorted(files)),
                   "laketide.source-stats": json.dumps([[1, files[n]] for n in sorted(files)])}
        return Snap(i, i - 1, i, at, summary)

    minute = 60_000
    chain = [commit(i, (i + 1) * 10 * minute, {f"f{i}.jsonl": i * 10 * minute + 1}) for i in range(100)]
    seen_ids: list[int] = []

    def fake_lineage(catalog: object, table: str, stop: Any) -> tuple[int, list[Snap]]:
        out = []
        for snap in reversed(chain):
            seen_ids.append(snap.snapshot_id)
            out.append(snap)
            if stop(snap):
                break
        return chain[-1].snapshot_id, out

    monkeypatch.setattr(partitions, "lineage", fake_lineage)

    def landed(name: str, mtime: int) -> Landed:
        return Landed(name, 1, mtime, mtime, None)

    everything = [landed(f"f{i}.jsonl", i * 10 * minute + 1) for i in range(100)]
    assert uncommitted(object(), stream(), everything) == []
    assert seen_ids == [99]  # the newest commit took the newest file: every older one was taken before
    seen_ids.clear()
    new = landed("new.jsonl", 1005 * minute)  # landed after the last commit
    assert uncommitted(object(), stream(), [*everything, new]) == [new]
    assert seen_ids == [99]
    seen_ids.clear()
    # a file older than the oldest one the walked commits took, not taken: Spark takes the oldest files first, so
    # it reached data/ after them; counted as committed here (the close's verification, which compares every
    # source position, finds it pending)
    skipped = landed("skipped.jsonl", 500 * minute + 5)
    assert uncommitted(object(), stream(), sorted([*everything, skipped], key=lambda f: f.mtime_ms)) == []
    seen_ids.clear()
    # ... unless it landed after the newest commit (a copy that kept an old modification time: cp -p): no commit
    # can hold it, it is pending until one names it (the writer refreshes its time and ingests it)
    copied = Landed("copied.jsonl", 1, 500 * minute + 5, 1005 * minute, None)
    assert uncommitted(object(), stream(), sorted([*everything, copied], key=lambda f: f.mtime_ms)) == [copied]
    assert seen_ids == [99]
    seen_ids.clear()
    # commits that did not record modification times (older writers): the walk stops at the first commit older
    # than the file (less the clock skew): none older can hold it
    for snap in chain:
        del snap.summary["laketide.source-stats"]
    assert uncommitted(object(), stream(), [skipped]) == [skipped]
    assert seen_ids == list(range(99, 47, -1))  # commit 48 (at 490 min) is the first older than 499 min


def test_backlog_splits_by_hour() -> None:
    from laketide.ingest.inspection import Landed

    files = [Landed("a", 1, 1, 5, KEY), Landed("b", 1, 2, 9, "2026-11-22T04:00:00+00:00"), Landed("c", 1, 3, 7, None),
             Landed("d", 1, 4, 4, "2026-11-22T01:00:00+00:00")]
    assert backlog(files, files, P) == Backlog(("a", "c", "d"), 1, 9)
    assert backlog(files, [], P) == Backlog((), 0, 9)
    assert backlog([], [], P) == Backlog()


def test_hours_checked_together_equal_hours_checked_alone(lake: Lake) -> None:
    for now in (lake.written_at, lake.written_at + timedelta(hours=5)):
        together = check_partitions(lake.config, lake.stream, lake.hours, now)
        alone = [check_partition(lake.config, lake.stream, hour, now)[0] for hour in lake.hours]
        assert [(s.partition, s.state, s.rows, s.watermark, s.snapshot_id) for s in together] == [
            (s.partition, s.state, s.rows, s.watermark, s.snapshot_id) for s in alone]
    assert check_partitions(lake.config, lake.stream, []) == []


def test_warm_read_equals_cold_read(lake: Lake) -> None:
    catalog = load_catalog(lake.config.catalog)
    cold = read(catalog, lake.stream, lake.hours[0], lake.written_at)
    warm = read(catalog, lake.stream, lake.hours[0], lake.written_at, cold)
    assert warm == cold
    with pytest.raises(ValueError, match="cursor is for partition"):
        read(catalog, lake.stream, lake.hours[1], lake.written_at, cold)


def test_landed_files_reads_the_listing_only(tmp_path: Path) -> None:
    """What the writer will read, from names, sizes and times (no line read): hidden and empty files left out, the
    hour from the name, else from the audit record, else unknown."""
    import os

    from laketide.ingest.inspection import landed_files
    from laketide.ingest.landing import audit_dir, data_dir, publish

    contract = publish(tmp_path, ['{"a": 1}'], KEY, "p", 0, "clicks")
    data, audits = data_dir(tmp_path), audit_dir(tmp_path)
    (data / "free-name.jsonl").write_text('{"a": 2}\n')
    (audits / "free-name.json").write_text(json.dumps({
        "version": 1, "stream": "clicks", "file": "free-name.jsonl", "producer": "x", "records": 1,
        "partitions": {"2026-11-22T05:00:00+00:00": 1}, "produced_at": "2026-11-22T05:10:00+00:00"}))
    (data / "no-audit.jsonl").write_text('{"a": 3}\n')
    (data / "_hidden.jsonl").write_text('{"a": 4}\n')
    (data / "empty.jsonl").write_bytes(b"")
    old = datetime(2020, 1, 1, tzinfo=UTC).timestamp()
    os.utime(data / "no-audit.jsonl", (old, old))  # a copy that kept an old modification time
    files = {f.name: f for f in landed_files(tmp_path)}
    assert set(files) == {contract.name, "free-name.jsonl", "no-audit.jsonl"}
    assert files[contract.name].hour == KEY
    assert files["free-name.jsonl"].hour == "2026-11-22T05:00:00+00:00"
    assert files["no-audit.jsonl"].hour is None
    copied = files["no-audit.jsonl"]
    assert copied.mtime_ms == int(old * 1000) and copied.landed_ms > copied.mtime_ms  # landed now (status change)
    assert next(iter(landed_files(tmp_path))).name == "no-audit.jsonl"  # oldest modification time first
    assert landed_files(tmp_path / "nothing") == []
