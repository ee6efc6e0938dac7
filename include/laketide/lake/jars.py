"""Provision the jars Spark needs without a Maven repository.

* Iceberg 1.10.2 Spark runtime for Spark 3.5 / Scala 2.12 (it bundles the SQL extensions), from the PyPI
  package ``snowpark-connect-deps-iceberg``.
* A companion jar with Jackson 2.18 relocated to ``org.apache.iceberg.shaded.com.fasterxml.jackson``: that
  copy of the runtime lacks Iceberg's relocated Jackson. Built with Debian's ``jarjar`` from the Jackson jars
  of the PyPI package ``snowpark-connect-deps-2``.
* JDBC drivers for the catalog from Debian: ``libxerial-sqlite-jdbc-java`` and ``libpostgresql-jdbc-java``.

Idempotent: a manifest of input checksums is kept beside the jars; a second run with the same inputs does
nothing. Users with a Maven repository set ``spark.packages`` in the configuration instead
(``spark.jars.packages``), and this step is skipped.

Run: ``python -m laketide.lake.jars`` (prints what it did).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from laketide.errors import JarsError

ICEBERG_VERSION = "1.10.2"
RUNTIME_JAR = f"iceberg-spark-runtime-3.5_2.12-{ICEBERG_VERSION}.jar"
JACKSON_VERSION = "2.18.8"
JACKSON_JARS = [f"jackson-{n}-{JACKSON_VERSION}.jar" for n in ("core", "databind", "annotations")]
COMPANION_JAR = f"iceberg-shaded-jackson-{JACKSON_VERSION}.jar"
JARJAR = Path("/usr/share/java/jarjar.jar")
JARJAR_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"
JDBC_DRIVERS = {
    "sqlite-jdbc.jar": (Path("/usr/share/java/sqlite-jdbc.jar"), "libxerial-sqlite-jdbc-java"),
    "postgresql.jar": (Path("/usr/share/java/postgresql.jar"), "libpostgresql-jdbc-java"),
}
MANIFEST = "laketide-jars.json"


@dataclass(frozen=True)
class JarSet:
    """The local jars a SparkSession needs, in classpath order."""

    runtime: Path
    companion: Path
    jdbc: tuple[Path, ...]

    @property
    def all(self) -> list[Path]:
        return [self.runtime, self.companion, *self.jdbc]


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise JarsError(
            f"Python package {package!r} is not installed; it carries the jars. "
            f"Run `pip install -r requirements.txt` in the project virtualenv."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _need(path: Path, hint: str) -> Path:
    if not path.is_file():
        raise JarsError(f"missing {path}: {hint}")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _sources() -> dict[str, Path]:
    iceberg_dir = _package_dir("snowpark_connect_deps_iceberg") / "jars"
    jackson_dir = _package_dir("snowpark_connect_deps_2") / "jars"
    pip_hint = "reinstall with `pip install -r requirements.txt`"
    sources = {RUNTIME_JAR: _need(iceberg_dir / RUNTIME_JAR, pip_hint)}
    for name in JACKSON_JARS:
        sources[name] = _need(jackson_dir / name, pip_hint)
    sources["jarjar"] = _need(JARJAR, "install Debian's jarjar: `apt-get install libjarjar-java`")
    for name, (path, deb) in JDBC_DRIVERS.items():
        sources[name] = _need(path, f"install the JDBC driver: `apt-get install {deb}`")
    return sources


def _build_companion(jackson: list[Path], out: Path) -> None:
    """Merge the Jackson jars and relocate them with jarjar into ``out``."""
    java = shutil.which("java")
    if java is None:
        raise JarsError("`java` is not on PATH: install OpenJDK 17 (`apt-get install openjdk-17-jre-headless`)")
    with tempfile.TemporaryDirectory() as tmp:
        merged = Path(tmp) / "jackson-merged.jar"
        seen: set[str] = set()
        with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as dst:
            for jar in jackson:
                with zipfile.ZipFile(jar) as src:
                    for item in src.infolist():
                        # multi-release module descriptors would name the unrelocated packages
                        if item.filename in seen or item.filename.startswith("META-INF/versions/"):
                            continue
                        if item.filename.endswith("module-info.class"):
                            continue
                        seen.add(item.filename)
                        dst.writestr(item, src.read(item.filename))
        rules = Path(tmp) / "rules.txt"
        rules.write_text(JARJAR_RULE)
        tmp_out = Path(tmp) / out.name
        result = subprocess.run(
            [java, "-jar", str(JARJAR), "process", str(rules), str(merged), str(tmp_out)],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0 or not tmp_out.is_file():
            raise JarsError(f"jarjar failed relocating Jackson ({result.returncode}): {result.stderr.strip()}")
        with zipfile.ZipFile(tmp_out) as check:
            names = check.namelist()
        probe = "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class"
        if probe not in names or any(n.startswith("com/fasterxml/") for n in names):
            raise JarsError(f"relocated Jackson jar {tmp_out} is incomplete: {probe} missing")
        shutil.copyfile(tmp_out, out)


def jar_set(jars_dir: Path) -> JarSet:
    """The provisioned jars in ``jars_dir``; raise JarsError naming what to run when one is missing."""
    hint = "run `make jars` (python -m laketide.lake.jars) to provision it"
    return JarSet(
        runtime=_need(jars_dir / RUNTIME_JAR, hint),
        companion=_need(jars_dir / COMPANION_JAR, hint),
        jdbc=tuple(_need(jars_dir / name, hint) for name in JDBC_DRIVERS),
    )


def provision(jars_dir: Path) -> tuple[JarSet, bool]:
    """Make sure every jar is in ``jars_dir``. Returns the set and whether anything was (re)built."""
    sources = _sources()
    jars_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = jars_dir / MANIFEST
    wanted = {name: {"source": str(path), "size": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns}
              for name, path in sources.items()}
    outputs = [RUNTIME_JAR, COMPANION_JAR, *JDBC_DRIVERS]
    if manifest_path.is_file() and all((jars_dir / n).is_file() for n in outputs):
        try:
            if json.loads(manifest_path.read_text()).get("inputs") == wanted:
                return jar_set(jars_dir), False
        except json.JSONDecodeError:
            pass
    for name in [RUNTIME_JAR, *JDBC_DRIVERS]:
        shutil.copyfile(sources[name].resolve(), jars_dir / name)
    _build_companion([sources[n] for n in JACKSON_JARS], jars_dir / COMPANION_JAR)
    manifest = {
        "inputs": wanted,
        "outputs": {n: _sha256(jars_dir / n) for n in outputs},
    }
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return jar_set(jars_dir), True


def main(argv: list[str] | None = None) -> int:
    from laketide.config import get_config

    config = get_config()
    if config.spark.packages:
        print(f"spark.packages is set ({', '.join(config.spark.packages)}): Spark resolves jars itself; "
              "nothing to provision")
        return 0
    try:
        jars, changed = provision(config.spark.jars_dir)
    except JarsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    state = "provisioned" if changed else "already up to date"
    print(f"jars {state} in {config.spark.jars_dir}:")
    for jar in jars.all:
        print(f"  {jar.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
