#!/usr/bin/env python3
"""Check the container image's recipe and the compose file without a container engine (CI has none).

What it checks, in seconds (the test suite runs this, ``tests/test_image.py``):

* the ``Dockerfile``: every ``COPY``/``ADD`` source exists in the build context and is not excluded by
  ``.dockerignore``; every requirements file a ``pip install -r`` step names exists and is a complete lock (every
  line pinned with ``==``, and every dependency of every pinned package, with the extras asked for, pinned too at a
  version its specifier accepts: read from the installed packages' metadata, so ``pip install -r`` has nothing to
  choose); every package an ``apt-get install`` step names is one ``scripts/setup.sh`` installs on the machines
  that run the tests (Debian bookworm, like the image's base);
* ``compose.yaml``: valid against the compose specification's JSON schema (vendored in ``scripts/compose/``), every
  bind-mounted file exists, every service's ``depends_on`` names a service, and the image the services run is one
  a service builds.

With ``--venv`` it also runs the Dockerfile's pip steps for real in a throwaway virtualenv: ``pip install -r`` of
each requirements file as a dry run against the package index (the resolution must install exactly the lock) and
``pip install --no-deps -e .`` of the project (minutes on a cold package cache).

Exit status 0 when everything holds, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from fnmatch import fnmatch
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "scripts" / "compose" / "compose-spec.json"

Instruction = tuple[str, str]


def instructions(text: str) -> list[Instruction]:
    """A Dockerfile's instructions as (KEYWORD, arguments): comments dropped, continuation lines joined."""
    result: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            keyword, _, args = whole.partition(" ")
            result.append((keyword.upper(), args.strip()))
    if pending.strip():
        keyword, _, args = pending.strip().partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def copy_sources(steps: list[Instruction]) -> list[str]:
    """The build-context sources of the ``COPY``/``ADD`` steps (not those copied from another stage)."""
    sources: list[str] = []
    for keyword, args in steps:
        if keyword not in ("COPY", "ADD"):
            continue
        words = json.loads(args) if args.startswith("[") else shlex.split(args)
        if any(w.startswith("--from") for w in words):
            continue
        words = [w for w in words if not w.startswith("--")]
        sources += words[:-1]
    return sources


def ignored(root: Path) -> list[str]:
    path = root / ".dockerignore"
    if not path.is_file():
        return []
    return [line.strip().rstrip("/") for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def check_copies(root: Path, steps: list[Instruction]) -> list[str]:
    problems = []
    patterns = ignored(root)
    for source in copy_sources(steps):
        name = source.rstrip("/") or "."
        if not (root / name).exists():
            problems.append(f"Dockerfile: COPY source {source!r} does not exist in the build context")
        elif any(fnmatch(name, p) or fnmatch(name, p.removeprefix("**/")) for p in patterns):
            problems.append(f"Dockerfile: COPY source {source!r} is excluded by .dockerignore")
    return problems


def shell_commands(steps: list[Instruction]) -> Iterator[list[str]]:
    """The simple commands of every ``RUN`` step, as words (``&&``, ``;`` and ``||`` split them)."""
    for keyword, args in steps:
        if keyword != "RUN":
            continue
        for part in re.split(r"&&|\|\||;", args):
            words = shlex.split(part)
            if words:
                yield words


def pip_requirement_files(steps: list[Instruction]) -> list[str]:
    files = []
    for words in shell_commands(steps):
        if "pip" in [Path(w).name for w in words[:3]] and "install" in words:
            files += [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-r", "--requirement")]
    return files


def apt_packages(steps: list[Instruction]) -> list[str]:
    packages = []
    for words in shell_commands(steps):
        if words[:2] in (["apt-get", "install"], ["apt", "install"]):
            packages += [w for w in words[2:] if not w.startswith("-")]
    return packages


def check_apt(root: Path, packages: list[str]) -> list[str]:
    match = re.search(r"APT_PACKAGES=\(([^)]*)\)", (root / "scripts" / "setup.sh").read_text())
    known = set(match.group(1).split()) if match else set()
    return [f"Dockerfile: apt package {p!r} is not one scripts/setup.sh installs (nothing proves it exists in Debian)"
            for p in packages if p not in known]


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def read_lock(path: Path) -> tuple[dict[str, str], list[str]]:
    """The pins of a requirements file, and its lines that are not pins."""
    pins: dict[str, str] = {}
    loose = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if match:
            pins[_name(match.group(1))] = match.group(2)
        else:
            loose.append(line)
    return pins, loose


def check_lock(path: Path) -> list[str]:
    """Every line pinned; every dependency of every pin (with the extras asked for) pinned at an accepted version."""
    from packaging.requirements import Requirement

    where = path.name
    pins, loose = read_lock(path)
    problems = [f"{where}: {line!r} is not pinned with ==" for line in loose]
    todo: list[tuple[str, frozenset[str]]] = [(name, frozenset()) for name in pins]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{where}: {name}=={pins[name]} is not installed here, its dependencies cannot be read "
                            "(install the lock first: make setup)")
            continue
        if _name(dist.metadata["Name"]) == name and dist.version != pins[name]:
            problems.append(f"{where}: {name} is pinned at {pins[name]} but {dist.version} is installed here "
                            "(make setup)")
            continue
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
                continue
            dep = _name(req.name)
            if dep not in pins:
                problems.append(f"{where}: {name} needs {req} and the lock has no {dep}")
            elif not req.specifier.contains(pins[dep], prereleases=True):
                problems.append(f"{where}: {name} needs {req} and the lock pins {dep}=={pins[dep]}")
            else:
                todo.append((dep, frozenset(req.extras)))
    return problems


def check_dockerfile(root: Path) -> list[str]:
    steps = instructions((root / "Dockerfile").read_text())
    if not steps or steps[0][0] not in ("FROM", "ARG"):
        return ["Dockerfile: does not start with FROM"]
    problems = check_copies(root, steps) + check_apt(root, apt_packages(steps))
    copied = {s.rstrip("/") for s in copy_sources(steps)}
    for name in pip_requirement_files(steps):
        if name not in copied:
            problems.append(f"Dockerfile: pip installs -r {name} but no COPY brings it into the image")
        if not (root / name).is_file():
            problems.append(f"Dockerfile: pip installs -r {name}, which does not exist")
        else:
            problems += check_lock(root / name)
    return problems


def _load_yaml(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text())


def check_compose(root: Path, name: str = "compose.yaml") -> list[str]:
    """The compose file against the compose specification's schema, and what the schema cannot see."""
    import jsonschema

    path = root / name
    document = _load_yaml(path)
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft201909Validator)(schema)
    problems = [f"{name}: {'.'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
                for error in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))]
    if problems or not isinstance(document, dict):
        return problems
    services: dict[str, Any] = document.get("services") or {}
    built = {str(s.get("image", "")) for s in services.values() if "build" in s}
    for service, spec in services.items():
        build = spec.get("build")
        context = build if isinstance(build, str) else (build or {}).get("context", ".") if build else None
        if context is not None and not (root / context / "Dockerfile").is_file():
            problems.append(f"{name}: services.{service}.build: no Dockerfile in {context!r}")
        image = spec.get("image")
        if image and "build" not in spec and image.startswith("laketide") and image not in built:
            problems.append(f"{name}: services.{service}.image {image!r} is built by no service")
        for volume in spec.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith((".", "/")) and not (root / source).exists():
                problems.append(f"{name}: services.{service}.volumes: {source!r} does not exist")
        depends = spec.get("depends_on") or []
        for other in depends if isinstance(depends, list) else depends.keys():
            if other not in services:
                problems.append(f"{name}: services.{service}.depends_on: no service {other!r}")
    return problems


def resolve_in_venv(root: Path) -> list[str]:
    """The Dockerfile's pip steps in a throwaway virtualenv: each lock resolves to exactly itself, then the
    project installs over it."""
    steps = instructions((root / "Dockerfile").read_text())
    problems = []
    with tempfile.TemporaryDirectory(prefix="laketide-image-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        for name in pip_requirement_files(steps):
            report = Path(tmp) / "report.json"
            run = subprocess.run([*pip, "install", "-q", "--dry-run", "--ignore-installed", "--report", str(report),
                                  "-r", str(root / name)], capture_output=True, text=True)
            if run.returncode != 0:
                problems.append(f"{name}: pip cannot resolve it in a clean virtualenv:\n{run.stderr[-2000:]}")
                continue
            got = {_name(i["metadata"]["name"]): i["metadata"]["version"]
                   for i in json.loads(report.read_text())["install"]}
            pins, _ = read_lock(root / name)
            extra = sorted(f"{k}=={v}" for k, v in got.items() if pins.get(k) != v)
            if extra:
                problems.append(f"{name}: resolving it installs what the lock does not pin: {', '.join(extra)}")
        run = subprocess.run([*pip, "install", "-q", "--no-deps", "--dry-run", "-e", str(root)], capture_output=True,
                             text=True)
        if run.returncode != 0:
            problems.append(f"pip install --no-deps -e . fails:\n{run.stderr[-2000:]}")
    return problems


def check(root: Path = ROOT, venv: bool = False) -> list[str]:
    problems = check_dockerfile(root) + check_compose(root)
    if venv:
        problems += resolve_in_venv(root)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", action="store_true",
                        help="also run the Dockerfile's pip steps in a throwaway virtualenv (minutes)")
    args = parser.parse_args(argv)
    problems = check(ROOT, venv=args.venv)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print("Dockerfile and compose.yaml: ok" + (" (pip steps resolved in a clean virtualenv)" if args.venv else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
