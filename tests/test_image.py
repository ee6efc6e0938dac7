"""The container image's recipe and the compose file, checked without a container engine (``scripts/check_image.py``):
the repository's own pass, and each kind of rot is reported."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from laketide.config import REPO_ROOT


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_image", REPO_ROOT / "scripts" / "check_image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_image"] = module
    spec.loader.exec_module(module)
    return module


check_image = _script()


def test_repository_image_and_compose_hold() -> None:
    assert check_image.check(REPO_ROOT) == []
    steps = check_image.instructions((REPO_ROOT / "Dockerfile").read_text())
    # what the checks looked at is what the image is made of
    assert check_image.pip_requirement_files(steps) == ["requirements.txt"]
    assert "openjdk-17-jre-headless" in check_image.apt_packages(steps)
    assert {"include/", "dags/", "spark_jobs/", "conf/", "requirements.txt"} <= set(check_image.copy_sources(steps))
    services = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())["services"]
    assert {"postgres", "redis", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer", "airflow-worker", "spark-master", "spark-worker", "producer"} <= set(services)


def test_instructions_join_continuations_and_drop_comments() -> None:
    steps = check_image.instructions(
        "# a comment\nFROM python:3.11-slim\nRUN apt-get update \\\n  # inside\n && apt-get install -y a b \\\n"
        "      c\nCOPY [\"x y\", \"./\"]\ncopy --chown=1:1 --from=build /a /b\n")
    assert steps[0] == ("FROM", "python:3.11-slim")
    assert check_image.apt_packages(steps) == ["a", "b", "c"]
    assert check_image.copy_sources(steps) == ["x y"]  # a copy from another stage is not the context's


def _context(tmp_path: Path, dockerfile: str) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    (tmp_path / "Dockerfile").write_text(dockerfile)
    return tmp_path


def test_dockerfile_rot_is_reported(tmp_path: Path) -> None:
    root = _context(tmp_path, "FROM python:3.11-slim-bookworm\n"
                              "RUN apt-get install -y --no-install-recommends openjdk-17-jre-headless libnope-java\n"
                              "COPY requirements.txt secret.env gone/ ./\n"
                              "RUN pip install -r requirements.txt && pip install -r other.txt\n")
    (root / "requirements.txt").write_text("pyyaml==6.0.3\n")
    (root / "secret.env").write_text("x")
    (root / ".dockerignore").write_text("*.env\n")
    problems = check_image.check_dockerfile(root)
    assert problems == [
        "Dockerfile: COPY source 'secret.env' is excluded by .dockerignore",
        "Dockerfile: COPY source 'gone/' does not exist in the build context",
        "Dockerfile: apt package 'libnope-java' is not one scripts/setup.sh installs (nothing proves it exists in "
        "Debian)",
        "Dockerfile: pip installs -r other.txt but no COPY brings it into the image",
        "Dockerfile: pip installs -r other.txt, which does not exist",
    ]


def test_incomplete_lock_is_reported(tmp_path: Path) -> None:
    lines = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    lock = tmp_path / "requirements.txt"
    kept = [line for line in lines if not line.startswith(("vine==", "amqp=="))]
    kept = [line.replace("billiard==4.3.2", "billiard==3.6.4") for line in kept] + ["fastapi>=0.1"]
    lock.write_text("\n".join(kept) + "\n")
    problems = check_image.check_lock(lock)
    assert "requirements.txt: 'fastapi>=0.1' is not pinned with ==" in problems
    assert any(p.startswith("requirements.txt: kombu needs amqp") and "lock has no amqp" in p for p in problems)
    assert any(p.startswith("requirements.txt: celery needs vine") for p in problems)
    assert any("billiard is pinned at 3.6.4 but 4.3.2 is installed" in p for p in problems)
    # the lock itself is complete: the extras a requirement asks for count (celery[redis] -> redis)
    assert check_image.check_lock(REPO_ROOT / "requirements.txt") == []


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d["services"]["redis"].update(restart=5), "compose.yaml: services.redis.restart: 5 is not of type"),
    (lambda d: d.update(servics={}), "compose.yaml: (top): 'servics' does not match any of the regexes"),
    (lambda d: d["services"]["producer"].update(depends_on=["kafka"]),
     "compose.yaml: services.producer.depends_on: no service 'kafka'"),
    (lambda d: d["services"]["postgres"]["volumes"].append("./scripts/compose/absent.sql:/x.sql"),
     "compose.yaml: services.postgres.volumes: './scripts/compose/absent.sql' does not exist"),
    (lambda d: d["services"]["spark-worker"].update(image="laketide:other"),
     "compose.yaml: services.spark-worker.image 'laketide:other' is built by no service"),
])
def test_compose_rot_is_reported(tmp_path: Path, change: object, expected: str) -> None:
    document = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())
    change(document)  # type: ignore[operator]
    shutil.copytree(REPO_ROOT / "scripts" / "compose", tmp_path / "scripts" / "compose")
    shutil.copy(REPO_ROOT / "Dockerfile", tmp_path / "Dockerfile")
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    problems = check_image.check_compose(tmp_path)
    assert any(p.startswith(expected) for p in problems), problems
