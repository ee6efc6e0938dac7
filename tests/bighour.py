"""A big hour made fast: a stream's two tables created with pyiceberg, ``rows`` events of one hour written as Parquet
with pyarrow and committed with ``table.append`` (not through the writer), and the landing zone's audit records of
the source files those rows name. Used by the verification memory test and ``bench/bench_big_hours.py``.

``measure`` runs a callable's module function in a fresh Python process and returns its peak resident memory
(``VmHWM``: the high-water mark of the process's own memory) and wall time, so the figure is the function's own.
Not ``ru_maxrss``: Linux carries it across ``execve``, and a child started by ``subprocess`` (vfork, then exec)
reports the parent's peak when that is higher: a pytest worker's or the benchmark driver's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from laketide.config import LaketideConfig, StreamConfig

#: rows per source (landing) file and per appended chunk
FILE_ROWS = 250_000


def iceberg_type(kind: str) -> Any:
    from pyiceberg import types as t

    return {"string": t.StringType(), "long": t.LongType(), "int": t.IntegerType(), "double": t.DoubleType(),
            "float": t.FloatType(), "boolean": t.BooleanType(), "timestamp": t.TimestamptzType()}[kind]


def create_tables(config: LaketideConfig, stream: StreamConfig) -> Any:
    """The events table (``hours(event_time)``) and the rejects table, as the writer lays them out."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import HourTransform
    from pyiceberg.types import BinaryType, LongType, NestedField, StringType, TimestamptzType

    from laketide.lake.catalog import load_catalog

    catalog = load_catalog(config.catalog)
    namespace = stream.table.split(".")[0]
    catalog.create_namespace_if_not_exists(namespace)
    fields = [NestedField(i + 1, name, iceberg_type(spec.type), required=False)
              for i, (name, spec) in enumerate(stream.fields.items())]
    fields += [NestedField(len(fields) + 1, "_source_file", StringType(), required=False),
               NestedField(len(fields) + 2, "_batch_id", LongType(), required=False)]
    time_id = next(f.field_id for f in fields if f.name == stream.event_time_field)
    events = catalog.create_table(stream.table, Schema(*fields), partition_spec=PartitionSpec(
        PartitionField(source_id=time_id, field_id=1000, transform=HourTransform(), name="event_time_hour")))
    kinds = [("raw", StringType()), ("raw_bytes", BinaryType()), ("reason", StringType()),
             ("source_file", StringType()), ("event_hour", TimestamptzType()), ("batch_id", LongType()),
             ("writer_id", StringType()), ("rejected_at", TimestamptzType())]
    catalog.create_table(stream.rejects_table, Schema(*[NestedField(i + 1, n, k, required=False)
                                                        for i, (n, k) in enumerate(kinds)]),
                         partition_spec=PartitionSpec(PartitionField(
                             source_id=5, field_id=1000, transform=HourTransform(), name="event_hour_hour")))
    return events


def chunk(stream: StreamConfig, hour: datetime, first: int, rows: int, source: str) -> Any:
    """``rows`` events of ``hour`` numbered from ``first`` (unique ids), as an Arrow table of the events table."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    index = np.arange(first, first + rows, dtype=np.int64)
    micros = int(hour.timestamp() * 1_000_000) + (index * 7_919) % 3_600_000_000
    columns: dict[str, Any] = {}
    for name, spec in stream.fields.items():
        if name == stream.event_id_field:
            columns[name] = pc.binary_join_element_wise("e", pa.array(index).cast(pa.string()), "")
        elif name == stream.event_time_field:
            columns[name] = pa.array(micros, pa.timestamp("us", tz="UTC"))
        elif spec.type in ("long", "int"):
            columns[name] = pa.array(index % 100_000, pa.int64() if spec.type == "long" else pa.int32())
        elif spec.type == "string":
            columns[name] = pa.DictionaryArray.from_arrays(pa.array(index % 50, pa.int32()),
                                                           pa.array([f"/{name}/{i}" for i in range(50)])
                                                           ).cast(pa.string())
        else:
            columns[name] = pa.nulls(rows, pa.from_numpy_dtype(np.float64) if spec.type in ("double", "float")
                                     else pa.bool_())
    columns["_source_file"] = pa.repeat(pa.scalar(source), rows)
    columns["_batch_id"] = pa.repeat(pa.scalar(0, pa.int64()), rows)
    return pa.table(columns)


def write_hour(config: LaketideConfig, stream: StreamConfig, hour: datetime, rows: int, first: int = 0,
               file_rows: int = FILE_ROWS) -> list[str]:
    """Append ``rows`` events of ``hour`` (one source file per ``file_rows``) and land their audit records;
    returns the source files. The events table must exist (:func:`create_tables`)."""
    from laketide.ingest.landing import AUDIT_VERSION, audit_dir, audit_name, data_dir
    from laketide.lake.catalog import load_catalog
    from laketide.lake.hours import partition_key

    table = load_catalog(config.catalog).load_table(stream.table)
    data, audits = data_dir(stream.landing_path), audit_dir(stream.landing_path)
    data.mkdir(parents=True, exist_ok=True)
    audits.mkdir(parents=True, exist_ok=True)
    sources = []
    for start in range(first, first + rows, file_rows):
        count = min(file_rows, first + rows - start)
        source = f"{hour:%Y%m%dT%H}-big-{start // file_rows:08d}-{start:08x}.jsonl"
        table.append(chunk(stream, hour, start, count, source))
        (audits / audit_name(source)).write_text(json.dumps({
            "version": AUDIT_VERSION, "stream": stream.name, "file": source, "producer": "big", "records": count,
            "partitions": {partition_key(hour): count}, "produced_at": (hour + timedelta(hours=1)).isoformat()}))
        (data / source).write_bytes(b"{}\n" * count)  # stand-in lines: the rows are committed already
        sources.append(source)
    return sources


def measure(module: str, function: str, *args: str) -> dict[str, Any]:
    """Run ``module.function(*args)`` in a fresh interpreter; its JSON result plus ``peak_mb`` and ``seconds``."""
    code = (
        "import json, sys, time\n"
        f"from {module} import {function} as run\n"
        "started = time.monotonic()\n"
        "result = run(*sys.argv[1:])\n"
        "seconds = time.monotonic() - started\n"
        "status = open('/proc/self/status').read()\n"
        "peak = int(status.split('VmHWM:')[1].split()[0]) / 1024\n"
        "print(json.dumps({**result, 'peak_mb': round(peak, 1), 'seconds': round(seconds, 2)}))\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False,
                          cwd=root, env=_env(root))
    if done.returncode != 0:
        raise RuntimeError(f"{module}.{function} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _env(root: Path) -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "include"), env.get("PYTHONPATH", "")])
    return env


def verify_in_process(config_path: str, hour: str) -> dict[str, Any]:
    """Verify one hour (the subprocess side of ``measure``): the counts and the outcome."""
    from laketide.close.verify import verify_partition
    from laketide.config import load_config
    from laketide.lake.hours import parse_partition

    config = load_config(Path(config_path), environ={})
    result = verify_partition(config, config.streams[0], parse_partition(hour))
    return {"success": result.success, "lake": result.lake, "audit": result.audit, "message": result.message()}


def reconcile_in_process(config_path: str, hour: str) -> dict[str, Any]:
    """Reconcile one hour (the subprocess side of ``measure``)."""
    from laketide.close.reconcile import reconcile
    from laketide.config import load_config
    from laketide.lake.hours import parse_partition

    config = load_config(Path(config_path), environ={})
    report = reconcile(config, config.streams[0], [parse_partition(hour)])
    return {"ok": report.ok, "partitions": [(p.partition, p.audit, p.lake, p.rejects) for p in report.partitions]}


def frame_in_process(config_path: str, hour: str) -> dict[str, Any]:
    """What the close's verification did before it was bounded, up to its GX call: the hour's checked columns
    read whole with pyiceberg and turned into a pandas frame (a lower bound of that path's peak: GX came on top)."""
    from laketide.close.verify import lake_rows
    from laketide.config import load_config
    from laketide.lake.catalog import load_stream_table
    from laketide.lake.hours import parse_partition

    config = load_config(Path(config_path), environ={})
    stream = config.streams[0]
    table = load_stream_table(config, stream.table, stream)
    frame = lake_rows(table, stream, parse_partition(hour), None).to_pandas()
    return {"rows": len(frame)}
