"""The package graph runs one way, and what serves never imports what measures.

The rules are import-linter's contracts in pyproject.toml: the gateway over the routes over the pipelines; inside the
gateway, the app over its domains over its infrastructure; no cycle between siblings at any depth; nothing outside
``routes.offline`` imports it (nor the tests' doubles). The first test runs them on the code as it is; the second shows
they bite, on a copy of the code given one upward import and one cycle. The last holds each package to its
``__init__``: another package imports what it names there, never a module inside it.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

from tests.benchmarks.import_graph import imports

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter's own command on the packages under ``root`` (found first on the path: it runs from there)."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": str(LINT_IMPORTS.parent)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_every_contract_holds() -> None:
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 broken." in result.stdout


def test_an_upward_import_and_a_cycle_break_the_contracts(tmp_path: Path) -> None:
    for package in ("gateway", "routes", "pipelines"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    # Infrastructure reaching up into a domain, and a pipeline importing the route table that imports it.
    with (tmp_path / "gateway" / "providers" / "llm.py").open("a") as module:
        module.write("\nfrom gateway.knowledge import service as _upward  # noqa: E402\n")
    with (tmp_path / "pipelines" / "shared" / "events.py").open("a") as module:
        module.write("\nfrom routes import table as _cycle  # noqa: E402\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "gateway.providers is not allowed to import gateway.knowledge" in result.stdout
    assert "pipelines is not allowed to import routes" in result.stdout
    assert "No cycles are allowed in gateway" in result.stdout


def _packages() -> list[str]:
    """The packages that name their public surface: each domain and infrastructure package of the gateway, each
    pipeline, and the calibration (the offline tools are nobody's dependency)."""
    found = [f"gateway.{p.parent.name}" for p in REPO.glob("gateway/*/__init__.py")]
    found += [f"pipelines.{p.parent.name}" for p in REPO.glob("pipelines/*/__init__.py")]
    return [*found, "routes.calibration"]


def _outside_imports_into_submodules() -> list[str]:
    """Every import in the service's code (and the offline tools') of a module inside another package."""
    packages = _packages()
    found = []
    for importer, imported in imports(REPO):
        owner = next((p for p in packages if imported.startswith(p + ".")), None)
        if owner is not None and not (importer == owner or importer.startswith(owner + ".")):
            found.append(f"{importer} imports {imported}")
    return found


def test_packages_are_used_through_what_their_init_names() -> None:
    assert _outside_imports_into_submodules() == []
    for package in _packages():
        offered = importlib.import_module(package)
        exported = getattr(offered, "__all__", [])
        assert all(hasattr(offered, name) for name in exported), package
