"""Big hours: the close's verification and one hour's reconciliation in bounded memory, and the writer's rejects pass.

Three parts, figures printed side by side in one run:

* **verification** of one hour of ``--rows`` rows (each size in a table of its own): peak resident memory and wall
  time of ``close.verify.verify_partition`` in a fresh process; for sizes up to ``--old-upto``, the same for the
  old path (the hour's columns read whole into pandas and validated row by row by GX, as the close did before);
* **reconciliation** of one hour of ``--hour-rows`` rows in tables of ``--tables`` rows in all (the rest in other
  hours): ``close.reconcile.reconcile(config, stream, [hour])`` in a fresh process, peak memory and time;
* **the writer's rejects pass** at ``--reject-rates`` of ``--lines`` landed lines: the real writer (one run each,
  ``availableNow``), the seconds its batches spent in the rejects pass (the writer's log: ``rejects N s``) and in all.

The hours' rows are generated with pyarrow and committed with pyiceberg (``tests.bighour``), not through the writer.

Run from the repository root: ``.venv/bin/python bench/bench_big_hours.py --rows 1000000,10000000``
(see bench/README.md for the figures and the options).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
for path in (REPO_ROOT, REPO_ROOT / "include"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from laketide.lake.hours import parse_partition  # noqa: E402
from tests.bighour import create_tables, measure, write_hour  # noqa: E402
from tests.helpers import load, write_config  # noqa: E402

HOUR = parse_partition("2026-11-19T08:00:00+00:00")


def sizes(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000000,10000000", help="verification: rows in the hour, comma-separated")
    parser.add_argument("--old-upto", type=int, default=1_000_000, help="also run the old in-memory path up to this")
    parser.add_argument("--tables", default="1000000,50000000", help="reconciliation: table sizes, comma-separated")
    parser.add_argument("--hour-rows", type=int, default=200_000, help="reconciliation: rows of the hour reconciled")
    parser.add_argument("--lines", type=int, default=500_000, help="rejects pass: landed lines per run")
    parser.add_argument("--reject-rates", default="0,0.001,0.1", help="rejects pass: shares of rejected lines")
    parser.add_argument("--parts", default="verify,reconcile,rejects", help="which parts to run")
    parser.add_argument("--workdir", type=Path, help="where tables and landing zones go (default: a temp folder)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    return parser.parse_args(argv)


def fresh(home: Path, name: str) -> tuple[Path, Any, Any]:
    if home.exists():
        shutil.rmtree(home)
    config_path = write_config(home, catalog_name=name)
    config = load(config_path)
    stream = config.stream("clicks")
    create_tables(config, stream)
    return config_path, config, stream


def bench_verify(work: Path, rows: list[int], old_upto: int) -> list[dict[str, Any]]:
    out = []
    for n in rows:
        config_path, config, stream = fresh(work / f"verify-{n}", "verify")
        started = time.monotonic()
        write_hour(config, stream, HOUR, n, file_rows=min(1_000_000, max(n // 10, 1)))
        written = time.monotonic() - started
        new = measure("tests.bighour", "verify_in_process", str(config_path), HOUR.isoformat())
        row: dict[str, Any] = {"rows": n, "write_s": round(written, 1), "peak_mb": new["peak_mb"],
                               "seconds": new["seconds"], "success": new["success"]}
        if n <= old_upto:
            old = measure("bench.bench_big_hours", "old_verify_in_process", str(config_path), HOUR.isoformat())
            row.update(old_peak_mb=old["peak_mb"], old_seconds=old["seconds"], old_success=old["success"])
        out.append(row)
        print(f"  verify {n:>11,} rows: {row}", flush=True)
        shutil.rmtree(work / f"verify-{n}")
    return out


def bench_reconcile(work: Path, tables: list[int], hour_rows: int) -> list[dict[str, Any]]:
    out = []
    for total in tables:
        config_path, config, stream = fresh(work / f"reconcile-{total}", "reconcile")
        started = time.monotonic()
        write_hour(config, stream, HOUR, hour_rows, file_rows=min(hour_rows, 1_000_000))
        rest, hour, first = total - hour_rows, HOUR, hour_rows
        while rest > 0:  # the other rows in other hours, up to 2M rows an hour
            hour -= timedelta(hours=1)
            n = min(rest, 2_000_000)
            write_hour(config, stream, hour, n, first=first, file_rows=1_000_000)
            rest, first = rest - n, first + n
        written = time.monotonic() - started
        got = measure("tests.bighour", "reconcile_in_process", str(config_path), HOUR.isoformat())
        row = {"table_rows": total, "hour_rows": hour_rows, "write_s": round(written, 1), "peak_mb": got["peak_mb"],
               "seconds": got["seconds"], "ok": got["ok"], "partitions": got["partitions"]}
        out.append(row)
        print(f"  reconcile one hour of a {total:>11,}-row table: {row}", flush=True)
        shutil.rmtree(work / f"reconcile-{total}")
    return out


def bench_rejects(work: Path, lines: int, rates: list[float]) -> list[dict[str, Any]]:
    from laketide.ingest.landing import publish
    from tests.helpers import run_writer, writer_log

    out = []
    files = 10
    for rate in rates:
        home = work / f"rejects-{rate}"
        if home.exists():
            shutil.rmtree(home)
        config_path = write_config(home, catalog_name="rejects", max_files_per_trigger=files)
        stream = load(config_path).stream("clicks")
        every = round(1 / rate) if rate else 0
        per_file = lines // files
        for f in range(files):
            batch = []
            for i in range(f * per_file, (f + 1) * per_file):
                if every and i % every == 0:
                    batch.append(json.dumps({"event_id": f"bad-{i}", "event_time": "not a time", "user_id": 1}))
                else:
                    t = HOUR + timedelta(microseconds=(i * 7_919) % 3_600_000_000)
                    batch.append(json.dumps({"event_id": f"e{i}", "event_time": t.isoformat(), "user_id": i % 1000,
                                             "page": f"/p{i % 50}", "duration_ms": i % 5000}))
            publish(stream.landing_path, batch, HOUR.isoformat(), "bench", f, stream.name)
        started = time.monotonic()
        code = run_writer(config_path, timeout=1800)
        wall = time.monotonic() - started
        log = writer_log(config_path)
        batches = re.findall(r"(\d+) valid, (\d+) rejected.*?rejects ([\d.]+)s, commit [\d.]+s; ([\d.]+)s\)", log)
        row = {"rate": rate, "lines": lines, "rejected": sum(int(b[1]) for b in batches),
               "valid": sum(int(b[0]) for b in batches), "batches": len(batches),
               "rejects_pass_s": round(sum(float(b[2]) for b in batches), 2),
               "batches_s": round(sum(float(b[3]) for b in batches), 2), "writer_wall_s": round(wall, 1),
               "exit": code}
        out.append(row)
        print(f"  rejects pass at {rate:.1%}: {row}", flush=True)
        shutil.rmtree(home)
    return out


def old_verify_in_process(config_path: str, hour: str) -> dict[str, Any]:
    """The close's verification before it was bounded: the hour's columns whole in pandas, GX row by row."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    from laketide.close.verify import lake_rows, validate
    from laketide.config import load_config
    from laketide.lake.catalog import load_stream_table
    from laketide.lake.hours import HOUR as ONE_HOUR

    config = load_config(Path(config_path), environ={})
    stream = config.streams[0]
    start = parse_partition(hour)
    df = lake_rows(load_stream_table(config, stream.table, stream), stream, start, None).to_pandas()
    expectations: list[Any] = [gxe.ExpectTableRowCountToEqual(value=len(df)),
                               gxe.ExpectColumnValuesToBeUnique(column=stream.event_id_field)]
    expectations += [gxe.ExpectColumnValuesToNotBeNull(column=n) for n, s in stream.fields.items() if s.required]
    expectations.append(gxe.ExpectColumnValuesToBeBetween(column=stream.event_time_field, min_value=start,
                                                          max_value=start + ONE_HOUR, strict_max=True))
    result = validate(df, gx.ExpectationSuite(name="old", expectations=expectations), stream)
    return {"success": bool(result.success), "rows": len(df)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    parts = set(args.parts.split(","))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="laketide-big-hours-"))
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    try:
        if "verify" in parts:
            print("verification of one hour (fresh process each; peak = VmHWM)", flush=True)
            figures["verify"] = bench_verify(work, sizes(args.rows), args.old_upto)
        if "reconcile" in parts:
            print(f"reconciliation of one {args.hour_rows:,}-row hour", flush=True)
            figures["reconcile"] = bench_reconcile(work, sizes(args.tables), args.hour_rows)
        if "rejects" in parts:
            print(f"the writer's rejects pass, {args.lines:,} lines", flush=True)
            figures["rejects"] = bench_rejects(work, args.lines, [float(r) for r in args.reject_rates.split(",")])
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n== side by side ==")
    for row in figures.get("verify", []):
        old = (f"; old path {row['old_peak_mb']:,.0f} MB, {row['old_seconds']:.1f} s "
               f"(x{row['old_peak_mb'] / row['peak_mb']:.1f} memory)" if "old_peak_mb" in row else "")
        print(f"verify   {row['rows']:>12,} rows: {row['peak_mb']:>7,.0f} MB peak, {row['seconds']:>7.1f} s "
              f"({row['peak_mb'] * 2**20 / row['rows']:.0f} bytes/row){old}")
    for row in figures.get("reconcile", []):
        print(f"reconcile one {row['hour_rows']:,}-row hour of {row['table_rows']:>12,} rows: "
              f"{row['peak_mb']:>7,.0f} MB peak, {row['seconds']:>6.1f} s")
    for row in figures.get("rejects", []):
        print(f"rejects  {row['rate']:>6.1%} ({row['rejected']:>7,} of {row['lines']:,}): rejects pass "
              f"{row['rejects_pass_s']:>6.2f} s of {row['batches_s']:>6.2f} s in {row['batches']} batches")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
