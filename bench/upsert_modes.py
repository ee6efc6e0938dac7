"""``bench_upsert.py --modes``: the merged table's two merge modes side by side, in one run.

For each mode of ``upsert.merge_mode`` (``merge-on-read``: position delete files beside the new rows;
``copy-on-write``: the data files holding changed rows rewritten), in interleaved rounds (the order rotated each
round), before any compaction:

``writer``
    laketide's upsert writer on the same landed changes into a fresh merged table of that mode (changes/s; the
    merged table must equal the fold of the input).
``batches``
    ``--mode-batches`` merges in a row of one ``--batch-keys``-change batch each (90 % updates, 5 % deletes, 5 % new
    keys; each batch other keys, spread over the table) into a merged table of each of ``--mode-rows`` rows: the
    merge sink's ``MERGE`` timed, as the growth part times it. Both modes start from the same base snapshot of one
    table (its merge mode set by its properties, then rolled back to the base after the reads: the same files).
``reads``
    after those batches: a full scan (``count(*)``, ``sum(balance)``) and one key's lookup, median of
    ``--read-repeats``; and the table's data and delete files.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laketide.ingest import merge_sink, upsert_tables

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

MODES = ("merge-on-read", "copy-on-write")
H0 = datetime(2026, 11, 20, 8, tzinfo=UTC)
LOOKUP = "acct-00001234"


def load() -> str:
    """The load averages (1, 5, 15 minutes), as ``uptime`` shows them: the machine may be shared."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def stream_of(bench: Any, tag: str, mode: str) -> Any:
    stream = bench.stream(tag)
    return stream.model_copy(update={"upsert": stream.upsert.model_copy(update={"merge_mode": mode})})


def set_mode(spark: SparkSession, name: str, stream: Any) -> None:
    """The merged table's merge mode properties, as ``upsert_tables.merged_properties`` gives them for ``stream``."""
    props = upsert_tables.merged_properties(stream.upsert)
    modes = ", ".join(f"'{k}'='{v}'" for k, v in props.items() if k.endswith(".mode"))
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({modes})")


def files(spark: SparkSession, name: str) -> tuple[int, int]:
    """The table's (data files, delete files)."""
    rows = spark.sql(f"SELECT content, count(*) FROM {name}.files GROUP BY content").collect()
    by = {int(r[0]): int(r[1]) for r in rows}
    return by.get(0, 0), by.get(1, 0) + by.get(2, 0)


def reads(spark: SparkSession, name: str, repeats: int) -> dict[str, float]:
    queries = {"scan": f"SELECT count(*), sum(balance) FROM {name}",
               "lookup": f"SELECT * FROM {name} WHERE account_id = '{LOOKUP}'"}
    out = {}
    for what, sql in queries.items():
        times = []
        for _ in range(repeats):
            started = time.monotonic()
            spark.sql(sql).collect()
            times.append(time.monotonic() - started)
        out[what] = statistics.median(times)
    return out


def base_table(bench: Any, rows: int) -> tuple[str, int]:
    """A merged table of ``rows`` rows (keys ``acct-00000000`` on, version 1); its name and base snapshot."""
    from pyspark.sql import functions as F

    stream = stream_of(bench, f"modes_{rows}", MODES[0])
    upsert_tables.ensure_upsert_tables(bench.spark, bench.config, stream)
    name = f"{bench.cat}.{stream.upsert.table}"
    (bench.spark.range(rows).select(
        F.col("id").cast("string").alias("change_id"), F.lit(H0).alias("changed_at"),
        F.format_string("acct-%08d", "id").alias("account_id"), F.lit(1).cast("long").alias("version"),
        (F.col("id") % 1000).alias("balance"), F.lit("active").alias("status"))
     .writeTo(name).overwrite(F.lit(True)))
    snapshot = bench.spark.sql(f"SELECT snapshot_id FROM {name}.snapshots ORDER BY committed_at DESC LIMIT 1")
    return name, int(snapshot.collect()[0][0])


def batch_fold(bench: Any, stream: Any, rows: int, keys: int, number: int) -> Any:
    """Batch ``number`` (1 on) of ``keys`` changes: other keys each batch, spread over the table; version
    ``number + 1``; one in twenty a delete, one in twenty a new key. Folded and checkpointed (not timed)."""
    from pyspark.sql import functions as F

    i = F.col("id")
    new_key = (i % 20) == 19
    key = F.when(new_key, rows + number * keys + i).otherwise((i * 7919 + number * 104_729) % rows)
    changes = bench.spark.range(keys).select(
        F.format_string(f"b{number}-%d", i).alias("change_id"), F.lit(H0).alias("changed_at"),
        F.format_string("acct-%08d", key).alias("account_id"), F.lit(number + 1).cast("long").alias("version"),
        F.when(new_key, F.lit("c")).when((i % 20) == 7, F.lit("d")).otherwise(F.lit("u")).alias("op"),
        F.lit(5).cast("long").alias("balance"), F.lit("active").alias("status"))
    return merge_sink.fold(changes, stream).localCheckpoint()


def batches(bench: Any, name: str, base: int, rows: int, mode: str, args: Any) -> dict[str, Any]:
    """``--mode-batches`` merges into table ``name`` from snapshot ``base`` in ``mode``, then the reads; the
    table is rolled back to ``base`` after (not timed)."""
    spark = bench.spark
    stream = stream_of(bench, f"modes_{rows}", mode)
    set_mode(spark, name, stream)
    sink = merge_sink.MergeSink(bench.config, stream)
    seconds = []
    for number in range(1, args.mode_batches + 1):
        folded = batch_fold(bench, stream, rows, args.batch_keys, number)
        folded.createOrReplaceTempView("modes_fold")
        started = time.monotonic()
        spark.sql(sink._merge_sql("modes_fold"))
        seconds.append(time.monotonic() - started)
        folded.unpersist()
    data, deletes = files(spark, name)
    read = reads(spark, name, args.read_repeats)
    spark.sql(f"CALL {bench.cat}.system.rollback_to_snapshot(table => '{name.split('.', 1)[1]}', "
              f"snapshot_id => {base})").collect()
    return {"batches_s": seconds, "data_files": data, "delete_files": deletes, "reads": read}


def run(bench: Any, input_path: Path, expected: dict[str, int], args: Any) -> dict[str, Any]:
    """The comparison (see the module's description); prints as it goes, returns the figures."""
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"--modes: {sorted(unknown)} not one of {list(MODES)}")
    sizes = [int(s) for s in args.mode_rows.split(",") if s.strip()]
    out: dict[str, Any] = {"writer": {m: [] for m in modes}, "tables": {}}
    for i in range(args.rounds if args.mode_writer else 0):
        for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
            tag = f"{mode.split('-')[0]}_{i}"
            took = bench.laketide(tag, input_path, mode)
            got = bench.table(f"bench.accounts_{tag}")
            wrong = sum(got.get(k) != v for k, v in expected.items()) + len(set(got) - set(expected))
            if wrong:
                raise AssertionError(f"{mode} round {i + 1}: {wrong} key(s) differ from the fold of the input")
            out["writer"][mode].append(took)
            print(f"  r{i + 1} writer {mode:13} {took:7.1f}s {args.changes / took:10,.0f} changes/s (load "
                  f"{load()})", flush=True)
    for rows in sizes:
        started = time.monotonic()
        name, base = base_table(bench, rows)
        data, _ = files(bench.spark, name)
        before = reads(bench.spark, name, args.read_repeats)
        print(f"  {rows:,} rows: built in {time.monotonic() - started:.0f}s, {data} data file(s); reads before any "
              f"batch: scan {before['scan']:.2f}s, lookup {before['lookup']:.2f}s", flush=True)
        table: dict[str, Any] = {"base_reads": before, "base_data_files": data, **{m: [] for m in modes}}
        for i in range(args.rounds):
            for mode in modes[i % len(modes):] + modes[:i % len(modes)]:
                got = batches(bench, name, base, rows, mode, args)
                table[mode].append(got)
                print(f"  r{i + 1} {rows:,} rows {mode:13} batches "
                      + ", ".join(f"{s:.2f}" for s in got["batches_s"])
                      + f"s; then {got['data_files']} data / {got['delete_files']} delete file(s), scan "
                      f"{got['reads']['scan']:.2f}s, lookup {got['reads']['lookup']:.2f}s (load {load()})", flush=True)
        out["tables"][rows] = table
    summary(out, modes, args)
    return out


def summary(out: dict[str, Any], modes: list[str], args: Any) -> None:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    for mode in modes if out["writer"][modes[0]] else ():
        print(f"{mode}: writer {args.changes / med(out['writer'][mode]):,.0f} changes/s (median of "
              f"{len(out['writer'][mode])})", flush=True)
    for rows, table in out["tables"].items():
        for mode in modes:
            runs = table[mode]
            print(f"{mode} into {rows:,} rows: first batch {med([r['batches_s'][0] for r in runs]):.2f}s, every "
                  f"batch {med([s for r in runs for s in r['batches_s']]):.2f}s; after {args.mode_batches}: scan "
                  f"{med([r['reads']['scan'] for r in runs]):.2f}s, lookup "
                  f"{med([r['reads']['lookup'] for r in runs]):.2f}s (median)", flush=True)
    if set(MODES) <= set(modes):
        mor, cow = MODES
        print("copy-on-write / merge-on-read, times:", flush=True)
        if out["writer"][mor]:
            print(f"  writer {med(out['writer'][cow]) / med(out['writer'][mor]):.2f}x", flush=True)
        for rows, table in out["tables"].items():
            def ratio(pick: Any, t: dict[str, Any] = table) -> float:
                return med([pick(r) for r in t[cow]]) / med([pick(r) for r in t[mor]])

            print(f"  {rows:,} rows: batch {ratio(lambda r: statistics.median(r['batches_s'])):.2f}x, scan after "
                  f"{args.mode_batches} batches {ratio(lambda r: r['reads']['scan']):.2f}x, lookup "
                  f"{ratio(lambda r: r['reads']['lookup']):.2f}x", flush=True)
