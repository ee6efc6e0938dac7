"""The writer benchmark's record: which writer ``bench_writers.py`` last measured, and its ratios.

``bench/writer_record.json`` names the writer's per-batch modules by one digest of their source. The test suite
(tests/test_writer_record.py) fails when those modules change and the record does not: a change of the writer's
code has to come with a run of ``bench/bench_writers.py --record`` (its ratios land in the record, beside the code
they were measured on), so a slower writer cannot pass unseen, and a ratio below :data:`FLOOR` fails the suite.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "bench" / "writer_record.json"
#: the modules of the writer's per-batch path, in include/laketide/ingest/
WRITER_MODULES = ("writer.py", "transforms.py", "parsed.py", "columns.py", "runner.py", "group.py", "public_writer.py",
                  "long_lines.py", "bom.py", "sink.py", "failures.py")
INGEST = ROOT / "include" / "laketide" / "ingest"
#: the least laketide/native ratio a record may carry (the target is 0.95; an earlier round's unseen fall was to 0.66)
FLOOR = 0.80
#: what a record is measured with: the benchmark's default input, and at least this many rounds. Four: the rounds
#: rotate the four pipelines' order by one, so in four rounds each pipeline runs once in each place. Within a round
#: the place moves a pipeline's speed by more than the writer's changes do (the first is the slowest, the second
#: 5-15 % faster): in three rounds one pipeline runs first twice and another never does
MIN_ROUNDS = 4


def writer_digest(folder: Path = INGEST) -> str:
    """sha256 over the writer's modules (each file's name, then its bytes)."""
    digest = hashlib.sha256()
    for name in WRITER_MODULES:
        digest.update(name.encode())
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def read(path: Path = RECORD) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def write(figures: dict[str, Any], path: Path = RECORD) -> None:
    path.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
