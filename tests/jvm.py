"""Faster Spark JVM starts for the test suite: a class-data-sharing archive, the C1 compiler only, the serial GC.

The suite starts about a hundred Spark JVMs: writers killed and started again, jobs submitted by DAGs, sessions
in the test process. Each one spent about 15 CPU-seconds starting (loading and verifying Spark's classes, JIT
compiling on several threads, a parallel collector) on a 2-core machine where two test workers run side by side.
Measured here on a small writer run (``bench/README.md``, "the test suite"): wall 9.2 s -> 5.6 s, CPU 15 s -> 7 s.

* an AppCDS archive (JDK 13+ dynamic archive) of the classes a real writer batch loads, built once per machine
  and class path by running that batch with ``-XX:ArchiveClassesAtExit`` (cached under ``.laketide/jvm/``, keyed by
  the Java version and the jars); a JVM that cannot use it (another class path) runs without it;
* ``-XX:TieredStopAtLevel=1``: the C1 compiler only. Short-lived test JVMs spend less compiling than they would
  gain, and so does a test worker's own session JVM, though it lives as long as the worker: its optimizing compiler
  spent more CPU than the whole session's driver work in a suite run (two C2 threads ~140 CPU-s in the first 18
  minutes) and gave less back (the 2,000-commit history: 181 CPU-s with C1 only, 191 with both compilers; the redo,
  backfill and history modules in one process: 381 against 413, the same wall time);
* ``-XX:+UseSerialGC``: small test heaps, no collector threads competing for the two cores.

None of this changes what a test proves: the same Spark, Iceberg and laketide code runs, on the same data.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from laketide.config import REPO_ROOT

ARCHIVE_DIR = REPO_ROOT / ".laketide" / "jvm"
FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def _key(jars_dir: Path) -> str:
    """What the archive depends on: the Java runtime and every jar of the class path (names and sizes)."""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    jars = sorted((p.name, p.stat().st_size) for d in (Path(pyspark.__file__).parent / "jars", jars_dir)
                  for p in d.glob("*.jar"))
    return hashlib.sha256(repr((java, jars, FLAGS)).encode()).hexdigest()[:16]


def archive_path(jars_dir: Path) -> Path:
    return ARCHIVE_DIR / f"spark-{_key(jars_dir)}.jsa"


def java_options(jars_dir: Path) -> str:
    """The test JVMs' options: the flags, and the archive when it exists."""
    path = archive_path(jars_dir)
    return f"{FLAGS} -XX:SharedArchiveFile={path}" if path.is_file() else FLAGS


def _alive(group: int) -> bool:
    """A process of the process group ``group`` (the writer's, which holds its JVM) is still running."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def ensure_archive(jars_dir: Path) -> Path | None:
    """Build the archive unless it exists (one builder at a time: test workers wait for each other); None when the
    JVM could not build it (the tests then run without it)."""
    from tests.helpers import start_writer, write_config
    from tests.test_writer import produce

    path = archive_path(jars_dir)
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    with open(ARCHIVE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path
        for stale in (*ARCHIVE_DIR.glob("spark-*.jsa"), *ARCHIVE_DIR.glob("spark-*.tmp")):
            stale.unlink()  # another class path's, or a build that was cut off
        home = Path(tempfile.mkdtemp(prefix="laketide-jvm-"))
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            config = write_config(home, java_options=f"{FLAGS} -XX:ArchiveClassesAtExit={partial}")
            produce(config, "--start", "2026-11-21T20:00:00+00:00", "--hours", "2", "--events-per-hour", "300",
                    "--events-per-file", "100", "--malformed-ratio", "0.05", "--seed", "3")
            proc = start_writer(config)
            if proc.wait(timeout=600) != 0:
                return None
            # the JVM writes the archive as it exits, after the writer's Python process is gone
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and _alive(proc.pid):
                time.sleep(0.2)
            if _alive(proc.pid) or not partial.is_file():
                return None
            partial.rename(path)
            return path
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":  # ``make test-jvm``: the archive is built as part of the tests' set-up
    from laketide.lake.jars import provision
    from tests.helpers import JARS_DIR

    provision(JARS_DIR)
    built = ensure_archive(JARS_DIR)
    print(f"test JVMs' class-data archive: {built}" if built else
          "test JVMs' class-data archive: the JVM could not build one (the tests run without it)")
