"""The package layout: one exceptions module, stage packages that import downward only, development tools behind a
zero-cost guard."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from laketide.config import REPO_ROOT

PACKAGE = REPO_ROOT / "include" / "laketide"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def test_every_exception_class_is_in_errors() -> None:
    errors = ast.parse((PACKAGE / "errors.py").read_text())
    known = {"Exception", "BaseException", "ValueError"} | {
        node.name for node in ast.walk(errors) if isinstance(node, ast.ClassDef)}
    elsewhere = [
        f"{path.relative_to(PACKAGE)}: {node.name}"
        for path in _modules() if path.name != "errors.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and any(_name(base) in known for base in node.bases)
    ]
    assert elsewhere == [], "exception classes belong in laketide/errors.py"


def _top_level_dev_imports(path: Path) -> list[str]:
    found = []
    for node in ast.parse(path.read_text()).body:  # module level only: a function's import runs when called
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("laketide.dev"):
            found.append(node.module or "")
        if isinstance(node, ast.ImportFrom) and node.module == "laketide" and any(
                a.name == "dev" for a in node.names):
            found.append("laketide.dev")
        if isinstance(node, ast.Import) and any(a.name.startswith("laketide.dev") for a in node.names):
            found.append("laketide.dev")
    return found


def test_production_code_does_not_import_development_tools() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): imports
        for path in _modules() if path.relative_to(PACKAGE).parts[0] != "dev"
        if (imports := _top_level_dev_imports(path))
    }
    assert offenders == {}, offenders


#: the stages, lowest first; a module may import its own stage and the ones below it (maintain and redo are peers
#: that do not import each other). ``runs`` (the local Airflow from a shell) serves ``cli``. ``dev`` is development
#: tooling above everything.
STAGES = {"errors": 0, "logs": 0, "config": 1, "notify": 2, "lake": 3, "ingest": 4, "close": 5, "maintain": 6,
          "redo": 6, "airflow": 7, "runs": 7, "cli": 8, "dev": 9}


def _runtime_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """The ``laketide.*`` modules a module imports when it runs (at any depth; not under ``if TYPE_CHECKING``)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _name(node.test) == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("laketide."):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("laketide."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_stage_packages_import_downward_only() -> None:
    """config -> lake -> ingest -> close -> maintain/redo -> airflow: an import that runs back up (or between the
    peers maintain and redo) is a seam in the wrong place. The one exception is the fault-point guard, which loads
    ``laketide.dev.faults`` only when a fault is armed (see the test below)."""
    upward = []
    for path in _modules():
        stage = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for line, module in _runtime_imports(ast.parse(path.read_text())):
            other = module.split(".")[1]
            if other == stage or (path.name == "faultpoints.py" and module == "laketide.dev"):
                continue
            if STAGES[other] >= STAGES[stage]:
                upward.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    assert upward == [], "\n".join(upward)


def _imported_after(code: str, **env: str) -> set[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LAKETIDE_FAULT")}
    listing = "print(' '.join(m for m in sys.modules if m.startswith('laketide')))"
    done = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\n{listing}"],
        env={**environ, "PYTHONPATH": str(PACKAGE.parent), **env}, capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_fault_points_cost_nothing_unless_armed(tmp_path: Path) -> None:
    loaded = _imported_after("from laketide.ingest import faultpoints\n"
                             "assert not faultpoints.ARMED\nassert faultpoints.maybe_pause('before_commit', 1) is None")
    assert "laketide.dev.faults" not in loaded and "laketide.dev" not in loaded
    armed = _imported_after("from laketide.dev import faults\nfrom laketide.ingest import faultpoints\n"
                            "assert faultpoints.ARMED and faultpoints.maybe_pause is faults.maybe_pause",
                            LAKETIDE_FAULT="before_commit:99", LAKETIDE_FAULT_DIR=str(tmp_path))
    assert "laketide.dev.faults" in armed


def test_the_stage_modules_that_serve_airflow_load_no_development_code() -> None:
    loaded = _imported_after("import laketide.close.closing, laketide.close.status, laketide.airflow.triggers\n"
                             "import laketide.maintain.plan, laketide.ingest.inspection\n"
                             "import laketide.ingest.runner, laketide.ingest.writer")
    assert not any(m.startswith("laketide.dev") for m in loaded), loaded


def test_the_suite_hands_out_its_slowest_modules_first(pytestconfig: pytest.Config) -> None:
    """Two workers finish together only if the long modules start first: the order of ``SLOWEST_FIRST`` is the
    queue (pytest-xdist's re-sorting by number of tests is off) and every module it names exists."""
    from tests.conftest import SLOWEST_FIRST

    assert pytestconfig.getoption("loadscopereorder") is False
    missing = [name for name in SLOWEST_FIRST if not (REPO_ROOT / "tests" / f"{name}.py").is_file()]
    assert missing == [], missing
