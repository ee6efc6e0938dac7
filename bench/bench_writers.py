"""Benchmark: laketide's writer, on both commit paths, against Spark's Parquet sink and Iceberg's native sink.

What is compared
----------------
Four Structured Streaming pipelines read the SAME landed input (newline-delimited JSON files published
with ``laketide.ingest.landing.publish``: audit records in ``<landing>/audit``, data in ``<landing>/data``), in
ONE process and ONE SparkSession (``local[2]``, built by ``laketide.lake.spark.build_session``), all with
``trigger(availableNow=True)`` and ``maxFilesPerTrigger = F``:

``parquet``
    Spark's plain Parquet file sink. The read is the one laketide does (``text`` source,
    ``from_json`` with the stream's typed schema, ``_metadata.file_name`` as ``_source_file``), written
    with ``writeStream.format("parquet")``, unpartitioned, with Iceberg's default codec (zstd) so that
    the codec is not what is measured.
``native``
    Iceberg's own streaming sink: the same read, ``writeStream.format("iceberg").outputMode("append")
    .option("fanout-enabled", "true").toTable(...)`` into a table created beforehand exactly like the
    laketide events table (same columns, ``hours(event_time)`` hidden partitioning and
    ``tables.create_events_table``). ``_batch_id`` is written as null: the native sink has no batch id.
``laketide``
    ``laketide.ingest.runner.start(spark, config, stream, "incremental")`` after ``ensure_tables``: parse and
    validate every line, split valid lines from rejects, per-batch stats and snapshot-summary markers,
    the idempotency (dedupe) lookups of the commit protocol, then the append to the events table, on the
    internal commit path (``commit_path: internal``).
``public``
    the same writer on the public commit path (``commit_path: public``, ``laketide.ingest.public_sink``):
    its ratio to the native sink is reported beside the internal path's (no target).

Each pipeline gets its own checkpoint folder and table per round. Wall time is measured from
``start()`` to the end of ``awaitTermination()``; rows/s is input rows / seconds. Afterwards every
sink's rows are counted (Parquet: ``spark.read.parquet``; Iceberg: the table; laketide: events +
rejects == input lines, and no rejects since the input is all valid) and the run fails loudly when a
count is off.

Rounds run the pipelines in a rotated order (round 1: parquet, native, laketide, public; round 2: native,
laketide, public, parquet; ...) to spread the noise of a shared machine, after one warm-up run of each on a
small input so that JIT and class loading do not penalise whoever goes first.

How to read the output
----------------------
The first table holds rows/s per round and the median over rounds (the figure the ratios use). Then
the ratios of the medians: ``laketide / native`` is the cost of laketide's guarantees over the bare
Iceberg sink (the target is >= 0.95, see ``bench/README.md``), ``native / parquet`` the cost of Iceberg
itself over plain files. The breakdown table sums Structured Streaming's ``durationMs`` over the
batches of a run (median over rounds): for the sinks nearly everything is ``addBatch`` (read, parse,
write, commit); ``laketide batch`` is the writer's own per-batch time from its INFO log. The last line
is the verdict, e.g. ``laketide writer vs Iceberg native sink: 0.97x (target >= 0.95)``.

Run from the repository root::

    .venv/bin/python bench/bench_writers.py                       # 2,000,000 events in 40 files
    .venv/bin/python bench/bench_writers.py --events 200000 --files 20 --rounds 1 --json /tmp/b.json
    .venv/bin/python bench/bench_writers.py --without-optional 1      # no line holds the optional fields
    .venv/bin/python bench/bench_writers.py --null-optional 1         # every line writes them as null
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import writer_record  # noqa: E402
from bench.writer_record import INGEST, MIN_ROUNDS, RECORD, ROOT, WRITER_MODULES, writer_digest  # noqa: E402
from laketide.config import LaketideConfig, StreamConfig  # noqa: E402
from laketide.ingest import columns, landing, runner, tables, writer  # noqa: E402
from laketide.lake.hours import partition_key  # noqa: E402
from tests.helpers import STREAM_FIELDS, load, write_config  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

PIPELINES = ("parquet", "native", "laketide", "public")
LABELS = {"parquet": "Spark Parquet sink", "native": "Iceberg native sink", "laketide": "laketide writer",
          "public": "laketide public path"}
#: the laketide pipelines and the commit path each runs (stream setting ``commit_path``)
COMMIT_PATHS = {"laketide": "internal", "public": "public"}
TARGET = 0.95
NAMESPACE = "bench"
PRODUCER = "bench"
WARMUP_FILES = 2
WARMUP_EVENTS_PER_FILE = 5_000
HOURS = 6
PROGRESS_KEYS = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets",
                 "triggerExecution")
BATCH_LOG = re.compile(r"batch (\d+) committed(?: as snapshot \d+)?: (\d+) valid, (\d+) rejected, .*[(; ]([\d.]+)s\)$")

PAGES = ("/", "/home", "/search", "/cart", "/checkout", "/product/{n}", "/category/{n}", "/help")
ACTIONS = ("view", "click", "scroll", "add_to_cart", "purchase", "share")
COUNTRIES = ("US", "DE", "FR", "BR", "IN", "JP", "GB", "ES", "NL", "CA")

#: wall seconds, progress reports, the laketide writer's per-batch log records
Outcome = tuple[float, list[dict[str, Any]], list[dict[str, float]]]


# ------------------------------------------------------------------------------------------ input


def _hour_starts(now: datetime) -> list[datetime]:
    """The ``HOURS`` full UTC hours before the current one (all event times are valid and in the past)."""
    current = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return [current - timedelta(hours=HOURS - i) for i in range(HOURS)]


def _lines(rng: random.Random, hour: datetime, count: int, without_optional: float = 0.0,
           null_optional: float = 0.0) -> list[bytes]:
    """``count`` valid events of the default test stream within ``hour``, formatted like ``json.dumps``; a share
    ``without_optional`` of them (every line, at 1) leave out the stream's optional fields, a share ``null_optional``
    write them as null."""
    bits = rng.getrandbits
    prefix = hour.strftime("%Y-%m-%dT%H:")
    pages = sorted({p.replace("{n}", str(n)) for p in PAGES for n in range(1, 26)})
    out: list[bytes] = []
    append = out.append
    for _ in range(count):
        micros = bits(32) % 3_600_000_000
        minute, rest = divmod(micros, 60_000_000)
        second, micro = divmod(rest, 1_000_000)
        event_time = f"{prefix}{minute:02d}:{second:02d}.{micro:06d}+00:00"
        user, page = bits(17) % 100_000 + 1, pages[bits(16) % len(pages)]
        action, country = ACTIONS[bits(8) % len(ACTIONS)], COUNTRIES[bits(8) % len(COUNTRIES)]
        required = (f'{{"event_id": "{bits(128):032x}", "event_time": "{event_time}", "user_id": {user}, '
                    f'"page": "{page}"')
        optional = f', "action": "{action}", "duration_ms": {bits(14)}, "country": "{country}"'
        if without_optional or null_optional:  # the default input draws no extra number: it stays as measured
            draw = rng.random()
            if draw < without_optional:
                optional = ""
            elif draw < without_optional + null_optional:
                optional = ', "action": null, "duration_ms": null, "country": null'
        append(f"{required}{optional}}}".encode())
    return out


def generate(landing_path: Path, events: int, files: int, stream_name: str, seed: int = 7,
             without_optional: float = 0.0, null_optional: float = 0.0) -> int:
    """Publish ``events`` valid events in ``files`` files (one UTC hour each, hours round-robin), a share
    ``without_optional`` of them without the stream's optional fields, a share ``null_optional`` with them null.

    Reuses what a previous run generated in the same folder when the manifest matches. Returns the number
    of lines published.
    """
    manifest = landing_path / "bench-input.json"
    wanted: dict[str, Any] = {"events": events, "files": files, "seed": seed, "fields": sorted(STREAM_FIELDS)}
    if without_optional:
        wanted["without_optional"] = without_optional
    if null_optional:
        wanted["null_optional"] = null_optional
    if manifest.is_file():
        if json.loads(manifest.read_text()) == wanted:
            print(f"reusing input in {landing_path}", flush=True)
            return events
        shutil.rmtree(landing_path)
    elif landing_path.exists():
        shutil.rmtree(landing_path)
    started = time.monotonic()
    rng = random.Random(seed)
    hours = _hour_starts(datetime.now(UTC))
    per_file, extra = divmod(events, files)
    published = 0
    for i in range(files):
        count = per_file + (1 if i < extra else 0)
        if count == 0:
            continue
        hour = hours[i % len(hours)]
        lines = _lines(rng, hour, count, without_optional, null_optional)
        landing.publish(landing_path, lines, partition_key(hour), PRODUCER, i, stream_name)
        published += count
    manifest.write_text(json.dumps(wanted))
    print(f"generated {published:,} events in {files} files under {landing_path} "
          f"({time.monotonic() - started:.1f}s)", flush=True)
    return published


def landed_lines(landing_path: Path) -> int:
    """Lines in the published data files (what every sink must account for)."""
    total = 0
    for path in landing.data_dir(landing_path).glob("*.jsonl"):
        with open(path, "rb") as handle:
            total += sum(1 for line in handle if line.strip())
    return total


# ------------------------------------------------------------------------------------------ pipelines


@dataclass
class RunResult:
    pipeline: str
    label: str
    round: str
    rows: int
    seconds: float
    batches: int
    progress_ms: dict[str, int]
    laketide_batches: list[dict[str, float]] = field(default_factory=list)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


class BatchLog(logging.Handler):
    """Collects the laketide writer's per-batch INFO lines (``batch N committed: ... (S s)``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.batches: list[dict[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = BATCH_LOG.search(record.getMessage())
        if match:
            batch, valid, rejected, seconds = match.groups()
            self.batches.append({
                "batch": int(batch), "valid": int(valid), "rejected": int(rejected),
                "seconds": float(seconds),
            })

    def take(self) -> list[dict[str, float]]:
        taken, self.batches = self.batches, []
        return taken


def _progress_dicts(query: StreamingQuery) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in query.recentProgress:
        out.append(item if isinstance(item, dict) else json.loads(item.json))
    return out


def _summarise(progress: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    """Batches that read rows, and ``durationMs`` summed per phase over all progress reports."""
    totals = dict.fromkeys(PROGRESS_KEYS, 0)
    batches = 0
    for item in progress:
        if item.get("numInputRows", 0) > 0:
            batches += 1
        for key, value in (item.get("durationMs") or {}).items():
            if key in totals:
                totals[key] += int(value)
    return batches, totals


class Bench:
    def __init__(self, spark: SparkSession, config: LaketideConfig, base: StreamConfig, runs: Path,
                 files_per_trigger: int, batch_log: BatchLog) -> None:
        self.spark = spark
        self.config = config
        self.base = base
        self.runs = runs
        self.files_per_trigger = files_per_trigger
        self.batch_log = batch_log
        self.cat = config.catalog.name
        self.fields = list(base.fields)
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.cat}.{NAMESPACE}")

    # the read the two reference sinks share: laketide's own extract, then one typed from_json
    def _read(self, landing_path: Path) -> DataFrame:
        from pyspark.sql import functions as F

        schema = columns.record_schema(self.base)
        return (
            self.spark.readStream.format("text")
            .option("maxFilesPerTrigger", self.files_per_trigger)
            .option("pathGlobFilter", "*.jsonl")
            .load(str(landing.data_dir(landing_path)))
            .select(F.from_json("value", schema).alias("r"),
                    F.col("_metadata.file_name").alias("_source_file"))
            .select(*[F.col("r")[n].alias(n) for n in self.fields], "_source_file",
                    F.lit(None).cast("bigint").alias("_batch_id"))
        )

    def _folder(self, tag: str, pipeline: str) -> Path:
        folder = self.runs / tag / pipeline
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _timed(self, start: Callable[[], StreamingQuery]) -> tuple[float, list[dict[str, Any]]]:
        started = time.perf_counter()
        query = start()
        query.awaitTermination()
        seconds = time.perf_counter() - started
        if query.exception() is not None:
            raise RuntimeError(f"query {query.name} failed: {query.exception()}")
        return seconds, _progress_dicts(query)

    def run(self, pipeline: str, tag: str, landing_path: Path, lines: int) -> RunResult:
        self.spark.catalog.clearCache()
        self.batch_log.take()
        runner = {"parquet": self._parquet, "native": self._native, "laketide": self._laketide,
                  "public": self._public}[pipeline]
        seconds, progress, laketide_batches = runner(tag, landing_path, lines)
        batches, totals = _summarise(progress)
        result = RunResult(pipeline, LABELS[pipeline], tag, lines, seconds, batches, totals, laketide_batches)
        extra = ""
        if laketide_batches:
            extra = f", writer batches {sum(b['seconds'] for b in laketide_batches):.1f}s"
        print(f"  {tag:>8} {LABELS[pipeline]:<20} {seconds:7.1f}s {result.rows_per_s:>11,.0f} rows/s "
              f"({batches} batches, addBatch {totals['addBatch'] / 1000:.1f}s{extra})", flush=True)
        return result

    def _parquet(self, tag: str, landing_path: Path, lines: int) -> Outcome:
        from pyspark.sql import functions as F

        folder = self._folder(tag, "parquet")
        out = folder / "out"
        seconds, progress = self._timed(
            lambda: self._read(landing_path).writeStream.format("parquet")
            .option("path", str(out))
            .option("compression", "zstd")
            .option("checkpointLocation", str(folder / "checkpoint"))
            .queryName(f"bench-parquet-{tag}")
            .trigger(availableNow=True)
            .start()
        )
        written = self.spark.read.parquet(str(out))
        row = written.agg(F.count("*").alias("n"), F.count("event_time").alias("t")).first()
        assert row is not None
        self._check(f"parquet {tag}", {"rows": row["n"], "rows with an event time": row["t"]}, lines)
        return seconds, progress, []

    def _native(self, tag: str, landing_path: Path, lines: int) -> Outcome:
        folder = self._folder(tag, "native")
        table = f"{self.cat}.{NAMESPACE}.native_{tag}"
        tables.create_events_table(self.spark, table, self.base)
        seconds, progress = self._timed(
            lambda: self._read(landing_path).writeStream.format("iceberg")
            .outputMode("append")
            .option("fanout-enabled", "true")
            .option("checkpointLocation", str(folder / "checkpoint"))
            .queryName(f"bench-native-{tag}")
            .trigger(availableNow=True)
            .toTable(table)
        )
        self._check(f"native {tag}", self._table_counts(table), lines)
        return seconds, progress, []

    def _table_counts(self, table: str) -> dict[str, int]:
        row = self.spark.sql(f"SELECT count(*) AS n, count(event_time) AS t FROM {table}").first()
        assert row is not None
        return {"rows": row["n"], "rows with an event time": row["t"]}

    def _public(self, tag: str, landing_path: Path, lines: int) -> Outcome:
        return self._laketide(tag, landing_path, lines, "public")

    def _laketide(self, tag: str, landing_path: Path, lines: int, pipeline: str = "laketide") -> Outcome:
        folder = self._folder(tag, pipeline)
        commit_path = COMMIT_PATHS[pipeline]
        stream = StreamConfig.model_validate({
            **self.base.model_dump(),
            "landing_path": landing_path,
            "checkpoint_path": folder / "checkpoint",
            "table": f"{NAMESPACE}.{pipeline}_{tag}",
            "rejects_table": f"{NAMESPACE}.{pipeline}_rejects_{tag}",
            "writer_id": f"bench-{pipeline}-{tag}",
            "max_files_per_trigger": self.files_per_trigger,
            "commit_path": commit_path,
        })
        tables.ensure_tables(self.spark, self.config, stream)
        seconds, progress = self._timed(
            lambda: runner.start(self.spark, self.config, stream, "incremental", commit_path))
        laketide_batches = self.batch_log.take()
        events = self.spark.table(f"{self.cat}.{stream.table}").count()
        rejects = self.spark.table(f"{self.cat}.{stream.rejects_table}").count()
        if events + rejects != lines:
            raise AssertionError(
                f"laketide {tag}: events {events:,} + rejects {rejects:,} = {events + rejects:,} "
                f"!= {lines:,} input lines"
            )
        if rejects:
            raise AssertionError(f"laketide {tag}: {rejects:,} rejects, yet all input lines are valid")
        self._check(f"laketide {tag}", {"events": events}, lines)
        logged = sum(int(b["valid"]) + int(b["rejected"]) for b in laketide_batches)
        if not laketide_batches:
            print(f"  note: no 'batch N committed' lines from the laketide.ingest.writer log in {tag}", flush=True)
        elif logged != lines:
            raise AssertionError(f"laketide {tag}: writer logged {logged:,} rows in batches, not {lines:,}")
        return seconds, progress, laketide_batches

    @staticmethod
    def _check(what: str, counts: dict[str, int], expected: int) -> None:
        wrong = {k: v for k, v in counts.items() if v != expected}
        if wrong:
            detail = ", ".join(f"{k} {v:,}" for k, v in wrong.items())
            raise AssertionError(f"{what}: ROW COUNT MISMATCH, expected {expected:,}: {detail}")


# ------------------------------------------------------------------------------------------ report


def order_of(round_index: int) -> list[str]:
    """Pipelines in the order of round ``round_index`` (0-based): rotated by one each round."""
    shift = round_index % len(PIPELINES)
    return [*PIPELINES[shift:], *PIPELINES[:shift]]


def summary(results: Sequence[RunResult], rounds: int) -> dict[str, Any]:
    per: dict[str, dict[str, Any]] = {}
    for pipeline in PIPELINES:
        mine = [r for r in results if r.pipeline == pipeline]
        per[pipeline] = {
            "label": LABELS[pipeline],
            "rows_per_s": [r.rows_per_s for r in mine],
            "seconds": [r.seconds for r in mine],
            "median_rows_per_s": statistics.median(r.rows_per_s for r in mine),
            "median_seconds": statistics.median(r.seconds for r in mine),
            "median_progress_ms": {
                k: statistics.median(r.progress_ms[k] for r in mine) for k in PROGRESS_KEYS
            },
            "median_laketide_batch_s": (
                statistics.median(sum(b["seconds"] for b in r.laketide_batches) for r in mine)
                if pipeline in COMMIT_PATHS else None
            ),
        }
    med = {p: per[p]["median_rows_per_s"] for p in PIPELINES}
    ratios = {
        "laketide/native": med["laketide"] / med["native"],
        "public/native": med["public"] / med["native"],
        "public/laketide": med["public"] / med["laketide"],
        "native/parquet": med["native"] / med["parquet"],
        "laketide/parquet": med["laketide"] / med["parquet"],
    }
    return {"pipelines": per, "ratios": ratios, "target": TARGET, "rounds": rounds}


def render(figures: dict[str, Any], rows: int) -> str:
    per = figures["pipelines"]
    rounds = figures["rounds"]
    heads = [f"round {i + 1}" for i in range(rounds)]
    lines = [
        f"rows per second ({rows:,} input rows; higher is better)",
        f"{'pipeline':<22}" + "".join(f"{h:>12}" for h in heads) + f"{'median':>12}{'median s':>10}",
    ]
    for pipeline in PIPELINES:
        p = per[pipeline]
        lines.append(
            f"{p['label']:<22}" + "".join(f"{v:>12,.0f}" for v in p["rows_per_s"])
            + f"{p['median_rows_per_s']:>12,.0f}{p['median_seconds']:>10.1f}"
        )
    lines += ["", "ratios of the medians"]
    for name, value in figures["ratios"].items():
        lines.append(f"  {name:<18} {value:6.2f}x")
    lines += ["", "where the time goes (seconds summed over a run's batches, median over rounds)"]
    keys = list(PROGRESS_KEYS)
    heading = "".join(f"{k:>{len(k) + 2}}" for k in keys)
    lines.append(f"{'pipeline':<22}{heading}{'laketide batch':>16}")
    for pipeline in PIPELINES:
        p = per[pipeline]
        own = p["median_laketide_batch_s"]
        lines.append(
            f"{p['label']:<22}"
            + "".join(f"{p['median_progress_ms'][k] / 1000:>{len(k) + 2}.1f}" for k in keys)
            + (f"{own:>16.1f}" if own is not None else f"{'-':>16}")
        )
    ratio = figures["ratios"]["laketide/native"]
    verdict = "ok" if ratio >= TARGET else "BELOW TARGET"
    lines += ["", f"laketide writer vs Iceberg native sink: {ratio:.2f}x (target >= {TARGET:.2f}) {verdict}",
              f"laketide public commit path vs Iceberg native sink: {figures['ratios']['public/native']:.2f}x "
              "(no target: reported)"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ main


def writer_fingerprint(digest: str) -> str:
    """Which laketide writer was measured: ``digest`` of the writer's modules (``writer_record.writer_digest``), and
    the newest modification time among them."""
    sources = [INGEST / name for name in WRITER_MODULES]
    modified = datetime.fromtimestamp(max(s.stat().st_mtime for s in sources), UTC)
    return (f"ingest/{{{','.join(WRITER_MODULES)}}} sha256:{digest[:12]} "
            f"newest change {modified:%Y-%m-%dT%H:%M:%SZ}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where input and outputs go (default: a temp folder, removed afterwards); "
                             "input generated there is reused by later runs with the same sizes")
    parser.add_argument("--events", type=int, default=2_000_000, help="valid events to land (default 2e6)")
    parser.add_argument("--files", type=int, default=40, help="landing files (default 40)")
    parser.add_argument("--files-per-trigger", type=int, default=10,
                        help="maxFilesPerTrigger of every pipeline (default 10)")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds (default 2)")
    parser.add_argument("--without-optional", type=float, default=0.0, metavar="SHARE",
                        help="the share of lines (0 to 1) that leave out the stream's optional fields (default 0: "
                             "every line holds every field)")
    parser.add_argument("--null-optional", type=float, default=0.0, metavar="SHARE",
                        help="the share of lines (0 to 1) that write the stream's optional fields as null (default 0)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the tables, files and checkpoints written")
    parser.add_argument("--verbose", action="store_true", help="echo the laketide writer's INFO log")
    parser.add_argument("--strict", action="store_true", help="exit 1 when laketide/native < target")
    parser.add_argument("--record", action="store_true",
                        help=f"write the ratios and the writer's digest to {RECORD.relative_to(ROOT)} (the default "
                             f"input, {MIN_ROUNDS} rounds or more): the test suite checks the writer against it")
    args = parser.parse_args(argv)
    for name in ("events", "files", "files_per_trigger", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.files > args.events:
        parser.error("--files may not exceed --events")
    shares = (args.without_optional, args.null_optional)
    if min(shares) < 0 or sum(shares) > 1:
        parser.error("--without-optional and --null-optional are shares of the lines: 0 to 1, together at most 1")
    if args.record:
        sizes = ("events", "files", "files_per_trigger", "without_optional", "null_optional")
        if any(getattr(args, n) != parser.get_default(n) for n in sizes) or args.rounds < MIN_ROUNDS:
            parser.error(f"--record measures the default input (no --events, --files, --files-per-trigger, "
                         f"--without-optional or --null-optional) in "
                         f"{MIN_ROUNDS} rounds or more (--rounds {MIN_ROUNDS})")
    return args


def record_run(figures: dict[str, Any], results: list[RunResult], rounds: int, measured: str) -> None:
    """Write the run's ratios to the writer record, with ``measured``, the digest of the writer that was measured."""
    if writer_digest() != measured:
        raise RuntimeError("the writer's modules changed while the benchmark ran: nothing recorded; run it again")
    per_round = [
        round(next(r.rows_per_s for r in results if r.round == tag and r.pipeline == "laketide")
              / next(r.rows_per_s for r in results if r.round == tag and r.pipeline == "native"), 3)
        for tag in [f"r{i + 1}" for i in range(rounds)]
    ]
    load_now = os.getloadavg()[0]
    writer_record.write({
        "writer_sha256": measured, "modules": list(WRITER_MODULES),
        "laketide_native": round(figures["ratios"]["laketide/native"], 3),
        "public_native": round(figures["ratios"]["public/native"], 3),
        "per_round": per_round, "rounds": rounds, "target": TARGET,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "load_average_at_end": round(load_now, 2),
    })
    print(f"recorded in {RECORD.relative_to(ROOT)}: laketide/native {figures['ratios']['laketide/native']:.2f}x "
          f"for writer sha256:{measured[:12]}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    digest = writer_digest()  # the source that was imported at start-up
    fingerprint = writer_fingerprint(digest)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    batch_log = BatchLog()
    writer.log.setLevel(logging.INFO)
    writer.log.addHandler(batch_log)
    writer.log.propagate = args.verbose  # echo the writer's per-batch lines only when asked

    temporary = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="laketide-bench-")) if temporary else args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    runs = workdir / f"run-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    spark: SparkSession | None = None
    succeeded = False
    try:
        config = load(write_config(runs / "home", max_files_per_trigger=args.files_per_trigger))
        # the console progress bar garbles the report; it is display only and off for every pipeline alike
        spark_settings = config.spark.model_copy(
            update={"conf": {**config.spark.conf, "spark.ui.showConsoleProgress": "false"}}
        )
        config = config.model_copy(update={"spark": spark_settings})
        base = config.streams[0]
        main_input, warm_input = workdir / "input" / "landing", workdir / "warmup" / "landing"
        generate(main_input, args.events, args.files, base.name, without_optional=args.without_optional,
                 null_optional=args.null_optional)
        generate(warm_input, WARMUP_FILES * WARMUP_EVENTS_PER_FILE, WARMUP_FILES, base.name, seed=11)
        rows, warm_rows = landed_lines(main_input), landed_lines(warm_input)
        if rows != args.events:
            raise AssertionError(f"landed {rows:,} lines, expected {args.events:,}")

        from laketide.lake.spark import build_session


        spark = build_session(config, "laketide-bench", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        bench = Bench(spark, config, base, runs, args.files_per_trigger, batch_log)
        shapes = [f"{args.without_optional:.0%} without the optional fields"] if args.without_optional else []
        shapes += [f"{args.null_optional:.0%} with them null"] if args.null_optional else []
        sparse = f" ({', '.join(shapes)})" if shapes else ""
        print(f"Spark {spark.version}, {spark.sparkContext.master}; {rows:,} events{sparse} in {args.files} files, "
              f"maxFilesPerTrigger {args.files_per_trigger}, {args.rounds} round(s); work in {runs}",
              flush=True)
        print(f"laketide writer under test: {fingerprint}", flush=True)

        print("warm-up", flush=True)
        for pipeline in PIPELINES:
            bench.run(pipeline, "warmup", warm_input, warm_rows)
        results: list[RunResult] = []
        for i in range(args.rounds):
            order = order_of(i)
            print(f"round {i + 1}: {', '.join(order)}", flush=True)
            for pipeline in order:
                results.append(bench.run(pipeline, f"r{i + 1}", main_input, rows))

        figures = summary(results, args.rounds)
        print()
        print(render(figures, rows), flush=True)
        if args.json:
            payload = {
                "events": rows, "files": args.files, "files_per_trigger": args.files_per_trigger,
                "without_optional": args.without_optional, "null_optional": args.null_optional,
                "rounds": args.rounds, "spark": spark.version, "master": spark.sparkContext.master,
                "writer": fingerprint,
                **figures, "runs": [{**asdict(r), "rows_per_s": r.rows_per_s} for r in results],
            }
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")
            print(f"figures written to {args.json}")
        if args.record:
            record_run(figures, results, args.rounds, digest)
        below = figures["ratios"]["laketide/native"] < TARGET
        succeeded = True
        return 1 if args.strict and below else 0
    finally:
        if spark is not None:
            spark.stop()
        writer.log.removeHandler(batch_log)
        if args.keep or not succeeded:
            print(f"tables, files and checkpoints kept in {runs}", flush=True)
        else:
            shutil.rmtree(workdir if temporary else runs, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
