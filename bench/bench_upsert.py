"""Benchmark: laketide's upsert writer against Iceberg's own ``MERGE INTO`` in ``foreachBatch``, and the cost of one
batch as the merged table grows.

Part 1, throughput (same session, same batches, same table layout). One landed input of change lines (``--changes``
changes to ``--keys`` keys in ``--files`` files: inserts, updates out of order, deletes), read by two Structured
Streaming pipelines with ``trigger(availableNow=True)`` and the same ``maxFilesPerTrigger``, in one ``local[2]``
SparkSession:

``laketide``
    the upsert stream's writer (``laketide.ingest.runner.start``): every line validated, the change log committed
    exactly once (fenced, with its markers), then the fold and the merge into the keyed table (``merge_sink``).
``merge``
    the bare path a user would write: ``from_json`` of each line with the stream's schema, each batch folded to one
    change per key (``row_number`` over the key by sequence: ``MERGE INTO`` refuses two source rows for one target
    row) and merged by ``MERGE INTO`` with the same conditions, into a table created with the same properties.

Each round runs both in rotated order into fresh tables; rows/s = changes / wall seconds; both merged tables must
equal the fold of the input (checked). Part 2, growth: one batch of ``--batch-keys`` changes (a tenth of them new
keys) merged by the merge sink (``MergeSink.apply``, as the writer merges a batch) into a merged table of 100k rows
and one of ``--big-rows`` rows (alternated, median of
``--growth-rounds``); the ratio big / small is the figure (target <= 3). Part 3, reads of the big table before
and after a compaction. With ``--modes``, instead of these parts: the merge modes side by side
(``bench/upsert_modes.py``).

Run from the repository root::

    .venv/bin/python bench/bench_upsert.py                               # defaults: 400,000 changes, 10M rows
    .venv/bin/python bench/bench_upsert.py --changes 40000 --big-rows 1000000 --rounds 1   # a quick look
    .venv/bin/python bench/bench_upsert.py --modes merge-on-read,copy-on-write --changes 200000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from laketide.config import LaketideConfig  # noqa: E402
from laketide.config.upsert import DELETE_OPERATIONS  # noqa: E402
from laketide.ingest import landing, merge_sink, runner, tables, upsert_tables  # noqa: E402
from laketide.ingest.columns import record_schema  # noqa: E402
from laketide.lake.hours import partition_key  # noqa: E402
from laketide.lake.internals import iceberg_table  # noqa: E402
from tests.helpers import ACCOUNT_FIELDS, load, write_config  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

H0 = datetime(2026, 11, 20, 8, tzinfo=UTC)
FIELDS = ACCOUNT_FIELDS
TARGET_RATIO, TARGET_GROWTH = 0.9, 3.0


def generate(landing_path: Path, changes: int, keys: int, files: int, seed: int = 5) -> dict[str, tuple[int, bool]]:
    """Land ``changes`` change lines in ``files`` files; return the fold: key -> (version, deleted)."""
    rng = random.Random(seed)
    versions = dict.fromkeys(range(keys), 0)
    newest: dict[str, tuple[int, bool, str]] = {}
    per_file = changes // files
    for f in range(files):
        hour = H0 + timedelta(hours=f * 4 // files)
        lines = []
        for i in range(per_file):
            key = rng.randrange(keys)
            versions[key] += 1
            version = versions[key] - (rng.random() < 0.05)  # one in twenty a step behind: out of order
            op = "c" if version <= 1 else ("d" if rng.random() < 0.05 else "u")
            cid = f"{key}-{version}-{f}-{i}"
            account = f"acct-{key:08d}"
            lines.append(json.dumps({
                "change_id": cid, "changed_at": (hour + timedelta(seconds=i % 3600)).isoformat(),
                "account_id": account, "version": version, "op": op, "balance": rng.randrange(10**6),
                "status": rng.choice(("active", "frozen", "closed"))}))
            order = (version, op in DELETE_OPERATIONS, cid)
            if account not in newest or order > newest[account]:
                newest[account] = order
        landing.publish(landing_path, lines, partition_key(hour), "bench", f + 1, "accounts")
    return {k: (v[0], v[1]) for k, v in newest.items()}


def expected_live(fold: dict[str, tuple[int, bool]]) -> dict[str, int]:
    return {k: v for k, (v, deleted) in fold.items() if not deleted}


class Bench:
    def __init__(self, spark: SparkSession, config: LaketideConfig, home: Path, per_trigger: int) -> None:
        self.spark, self.config, self.home, self.per_trigger = spark, config, home, per_trigger
        self.cat = config.catalog.name

    def stream(self, tag: str, mode: str | None = None) -> Any:
        base = self.config.streams[0]
        upsert = base.upsert.model_copy(update={"table": f"bench.accounts_{tag}",
                                                "merge_mode": mode or base.upsert.merge_mode})
        return base.model_copy(update={
            "name": f"up_{tag}", "table": f"bench.changes_{tag}", "rejects_table": f"bench.rejects_{tag}",
            "writer_id": f"bench-{tag}", "checkpoint_path": self.home / "checkpoints" / tag, "upsert": upsert})

    def laketide(self, tag: str, landing_path: Path, mode: str | None = None) -> float:
        stream = self.stream(tag, mode).model_copy(update={"landing_path": landing_path})
        tables.ensure_tables(self.spark, self.config, stream)
        upsert_tables.ensure_upsert_tables(self.spark, self.config, stream)
        started = time.monotonic()
        query = runner.start(self.spark, self.config, stream, "incremental")
        query.awaitTermination()
        return time.monotonic() - started

    def merge(self, tag: str, landing_path: Path) -> float:
        from pyspark.sql import functions as F

        stream = self.stream(tag)
        upsert_tables.ensure_upsert_tables(self.spark, self.config, stream)  # the same merged table, same properties
        target = f"{self.cat}.{stream.upsert.table}"
        columns = upsert_tables.merged_columns(stream)
        newer = merge_sink.newer(stream, "c", "t", "false")
        merge_sql = (  # what a user writes: the same conditions, no change log, no tombstones, no markers
            f"MERGE INTO {target} t USING batch_fold c ON t.account_id = c.account_id "
            f"WHEN MATCHED AND c.{merge_sink.DELETE} AND {newer} THEN DELETE "
            f"WHEN MATCHED AND NOT c.{merge_sink.DELETE} AND {newer} THEN UPDATE SET "
            + ", ".join(f"t.{c} = c.{c}" for c in columns if c != "account_id")
            + f" WHEN NOT MATCHED AND NOT c.{merge_sink.DELETE} THEN INSERT ({', '.join(columns)}) "
            f"VALUES ({', '.join('c.' + c for c in columns)})")

        def each(batch: DataFrame, batch_id: int) -> None:
            merge_sink.fold(batch, stream).createOrReplaceTempView("batch_fold")
            batch.sparkSession.sql(merge_sql)

        lines = (self.spark.readStream.format("text").option("maxFilesPerTrigger", self.per_trigger)
                 .option("pathGlobFilter", "*.jsonl").load(str(landing.data_dir(landing_path))))
        parsed = lines.select(F.from_json("value", record_schema(stream)).alias("r")).select("r.*")
        started = time.monotonic()
        query = (parsed.writeStream.foreachBatch(each).trigger(availableNow=True)
                 .option("checkpointLocation", str(self.home / "checkpoints" / tag)).start())
        query.awaitTermination()
        return time.monotonic() - started

    def table(self, name: str) -> dict[str, int]:
        rows = self.spark.table(f"{self.cat}.{name}").select("account_id", "version").collect()
        out = {str(r[0]): int(r[1]) for r in rows}
        if len(out) != len(rows):
            raise AssertionError(f"{name}: a key twice")
        return out

    def growth(self, rows: int, batch: int, tag: str, staged: bool = False) -> float:
        """Seconds of the merge sink's merge of one ``batch``-change increment (9 in 10 update a key of the table, 1 in
        10 inserts a new one) into a merged table of ``rows``."""
        from pyspark.sql import functions as F

        stream = self.stream(tag)
        if staged:  # the staging branch's plan whatever the table's size
            stream = stream.model_copy(update={"upsert": stream.upsert.model_copy(update={"staged_merge_rows": 0})})
        upsert_tables.ensure_upsert_tables(self.spark, self.config, stream)
        name = f"{self.cat}.{stream.upsert.table}"
        if self.spark.table(name).count() != rows:
            (self.spark.range(rows).select(
                F.col("id").cast("string").alias("change_id"), F.lit(H0).alias("changed_at"),
                F.format_string("acct-%08d", "id").alias("account_id"), F.lit(1).cast("long").alias("version"),
                (F.col("id") % 1000).alias("balance"), F.lit("active").alias("status"))
             .writeTo(name).overwrite(F.lit(True)))
        changes = self.spark.range(batch).select(
            F.format_string("x-%d", "id").alias("change_id"), F.lit(H0).alias("changed_at"),
            F.when(F.col("id") % 10 == 0, F.format_string("acct-new-%08d", "id"))
             .otherwise(F.format_string("acct-%08d", (F.col("id") * 7919) % rows)).alias("account_id"),
            F.lit(2).cast("long").alias("version"), F.lit("u").alias("op"), F.lit(5).cast("long").alias("balance"),
            F.lit("active").alias("status"))
        merge_sink.fold(changes, stream).localCheckpoint().createOrReplaceTempView("growth_fold")
        sink = merge_sink.MergeSink(self.config, stream)
        table = iceberg_table(self.spark, name)
        started = time.monotonic()
        sink.apply(self.spark, table, "growth_fold", batch, {}, merge_sink.applied_through(table), 0)
        seconds = time.monotonic() - started
        # back to the base rows for the next round (not timed)
        self.spark.sql(f"DELETE FROM {name} WHERE account_id LIKE 'acct-new-%'")
        self.spark.sql(f"UPDATE {name} SET version = 1 WHERE version = 2")
        return seconds


    def reads(self, tag: str, repeats: int) -> dict[str, Any]:
        """Read times over the merged table of ``tag`` (a full scan that sums a column, and one key's lookup), its
        delete files, before and after a compaction as the maintenance job runs it on a merged table (data files
        rewritten with their deletes applied, then the position deletes left pointing at them dropped)."""
        name = f"{self.cat}.{self.stream(tag).upsert.table}"
        queries = {"scan": f"SELECT count(*), sum(balance) FROM {name}",
                   "lookup": f"SELECT * FROM {name} WHERE account_id = 'acct-00001234'"}

        def measure() -> dict[str, float]:
            out = {}
            for what, sql in queries.items():
                times = []
                for _ in range(repeats):
                    started = time.monotonic()
                    self.spark.sql(sql).collect()
                    times.append(time.monotonic() - started)
                out[what] = statistics.median(times)
            return out

        def deletes() -> int:
            return int(self.spark.sql(f"SELECT count(*) FROM {name}.delete_files").collect()[0][0])

        before, deletes_before, rows = measure(), deletes(), self.spark.table(name).count()
        started = time.monotonic()
        self.spark.sql(f"CALL {self.cat}.system.rewrite_data_files(table => '{name}', options => "
                       "map('delete-file-threshold', '1', 'min-input-files', '1'))").collect()
        self.spark.sql(f"CALL {self.cat}.system.rewrite_position_delete_files(table => '{name}', "
                       "options => map('rewrite-all', 'true'))").collect()
        compaction = time.monotonic() - started
        after = measure()
        if self.spark.table(name).count() != rows:
            raise AssertionError(f"{name}: the compaction changed the row count")
        return {"rows": rows, "delete_files_before": deletes_before, "delete_files_after": deletes(),
                "before": before, "after": after, "compaction_s": compaction}


def growth_and_reads(bench: Bench, config: LaketideConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Parts 2 and 3: one batch's merge as the merged table grows, then reads of the big table before and after
    compaction."""
    # the writer's plan at each size (one MERGE below upsert.staged_merge_rows, the staging branch above), and the
    # staging branch's plan on the small table too: the growth of one plan
    growth: dict[str, list[float]] = {"small": [], "big": [], "small_staged": []}
    for i in range(args.growth_rounds):
        for size in (("small", "small_staged", "big") if i % 2 == 0 else ("big", "small_staged", "small")):
            rows = args.big_rows if size == "big" else args.small_rows
            took = bench.growth(rows, args.batch_keys, f"growth_{size}", staged=size == "small_staged")
            growth[size].append(took)
            staged = size == "small_staged" or rows >= config.streams[0].upsert.staged_merge_rows
            plan = "staging branch" if staged else "one MERGE"
            print(f"  growth r{i + 1} {args.batch_keys:,} changes into {rows:,} rows ({plan}): {took:.2f}s", flush=True)
    median = {size: statistics.median(times) for size, times in growth.items()}
    factor = median["big"] / median["small"]
    staged_factor = median["big"] / median["small_staged"]
    print(f"one {args.batch_keys:,}-change merge into {args.big_rows:,} rows vs {args.small_rows:,} rows: "
          f"{factor:.2f}x as the writer merges (target <= {TARGET_GROWTH}); {staged_factor:.2f}x on the staging "
          f"branch at both sizes ({median['big']:.2f}s, {median['small']:.2f}s, {median['small_staged']:.2f}s)",
          flush=True)
    read = bench.reads("growth_big", args.read_repeats)
    print(f"reads of the {read['rows']:,}-row merged table (median of {args.read_repeats}): "
          + "; ".join(f"{what} {read['before'][what]:.2f}s with {read['delete_files_before']} delete file(s), "
                      f"{read['after'][what]:.2f}s after compaction ({read['before'][what] / read['after'][what]:.1f}x)"
                      for what in ("scan", "lookup"))
          + f"; the compaction {read['compaction_s']:.1f}s, {read['delete_files_after']} delete file(s) left",
          flush=True)
    return {"growth": growth, "growth_factor": factor, "growth_factor_staged": staged_factor, "reads": read}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--files-per-trigger", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--big-rows", type=int, default=10_000_000)
    parser.add_argument("--small-rows", type=int, default=100_000)
    parser.add_argument("--batch-keys", type=int, default=10_000)
    parser.add_argument("--growth-rounds", type=int, default=3)
    parser.add_argument("--read-repeats", type=int, default=3, help="times each read is run, before and after")
    parser.add_argument("--modes", default=None, help="instead of parts 1-3: these merge modes side by side, "
                        "e.g. merge-on-read,copy-on-write (bench/upsert_modes.py)")
    parser.add_argument("--mode-rows", default="1000000,10000000", help="with --modes: the merged tables' sizes")
    parser.add_argument("--mode-writer", action=argparse.BooleanOptionalAction, default=True,
                        help="with --modes: the writer's part (--no-mode-writer: the merged tables' part only)")
    parser.add_argument("--mode-batches", type=int, default=3, help="with --modes: batches merged before the reads")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for name in ("laketide.ingest.writer", "laketide.ingest.merge_sink"):  # the per-batch lines
        logging.getLogger(name).setLevel(logging.INFO)

    work = (args.workdir or Path(tempfile.mkdtemp(prefix="laketide-bench-upsert-"))).resolve()
    home = work / f"run-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    config = load(write_config(
        home, table="bench.changes", rejects_table="bench.rejects", event_time_field="changed_at",
        event_id_field="change_id", fields=FIELDS, max_files_per_trigger=args.files_per_trigger,
        upsert={"table": "bench.accounts", "primary_key": ["account_id"], "sequence_field": "version",
                "operation_field": "op",
                "tombstone_retention": "3650d"}))  # the input's change times are fixed: never "too late"
    config = config.model_copy(update={"spark": config.spark.model_copy(update={"conf": {
        **config.spark.conf, "spark.ui.showConsoleProgress": "false"}})})
    input_path = home / "input"
    expected = expected_live(generate(input_path, args.changes, args.keys, args.files))
    from laketide.lake.spark import build_session

    spark = build_session(config, "laketide-bench-upsert", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    bench = Bench(spark, config, home, args.files_per_trigger)
    print(f"Spark {spark.version}; {args.changes:,} changes to {args.keys:,} keys in {args.files} files, "
          f"maxFilesPerTrigger {args.files_per_trigger}, {args.rounds} round(s); work in {home}", flush=True)
    warm = home / "warmup"
    generate(warm, 4000, 1000, 2, seed=9)
    if args.modes:
        from bench.upsert_modes import run as run_modes

        for mode in args.modes.split(","):  # JIT and class loading, paid before anything is timed
            bench.laketide(f"warm_{mode.strip().split('-')[0]}", warm, mode.strip())
        modes = run_modes(bench, input_path, expected, args)
        spark.stop()
        if args.json:
            args.json.write_text(json.dumps(modes, indent=1))
        return 0
    for pipeline in ("laketide", "merge"):  # JIT and class loading, paid before anything is timed
        bench.laketide("warm_l", warm) if pipeline == "laketide" else bench.merge("warm_m", warm)
    seconds: dict[str, list[float]] = {"laketide": [], "merge": []}
    for i in range(args.rounds):
        order = ["laketide", "merge"] if i % 2 == 0 else ["merge", "laketide"]
        for pipeline in order:
            tag = f"{pipeline}_{i}"
            took = bench.laketide(tag, input_path) if pipeline == "laketide" else bench.merge(tag, input_path)
            seconds[pipeline].append(took)
            got = bench.table(f"bench.accounts_{tag}")
            wrong = sum(got.get(k) != v for k, v in expected.items()) + len(set(got) - set(expected))
            if pipeline == "laketide" and wrong:
                raise AssertionError(f"laketide round {i + 1}: {wrong} key(s) differ from the fold of the input")
            print(f"  r{i + 1} {pipeline:9} {took:7.1f}s {args.changes / took:10,.0f} changes/s "
                  f"({len(got):,} live keys; {wrong} differ from the fold of the input"
                  + (": no tombstones, a late older change of a deleted key comes back)" if wrong else ")"), flush=True)
    rates = {p: args.changes / statistics.median(s) for p, s in seconds.items()}
    ratio = rates["laketide"] / rates["merge"]
    per_round = [m / s for s, m in zip(seconds["laketide"], seconds["merge"], strict=True)]
    print(f"laketide upsert writer vs MERGE INTO in foreachBatch: {ratio:.2f}x (rounds "
          f"{', '.join(f'{r:.2f}' for r in per_round)}; target >= {TARGET_RATIO})", flush=True)

    figures: dict[str, Any] = {"ratio": ratio, "per_round": per_round, "seconds": seconds}
    if args.growth_rounds > 0:  # --growth-rounds 0: part 1 only
        figures.update(growth_and_reads(bench, config, args))
    spark.stop()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
