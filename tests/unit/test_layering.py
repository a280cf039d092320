"""The serving path is gateway → routes → pipelines, one way, and carries no offline tool or test double."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = ("routes.offline.training", "routes.offline.eval", "tests")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (a lazy import counts too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def offenders(package: str, forbidden: tuple[str, ...], *, skip: str | None = None) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        if skip is not None and skip in path.parts:
            continue
        bad = sorted(m for m in imported_modules(path) if m.split(".")[0] in forbidden)
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def test_pipelines_import_neither_the_gateway_nor_the_router() -> None:
    assert offenders("pipelines", ("gateway", "routes")) == {}


def test_the_serving_router_does_not_import_the_gateway() -> None:
    assert offenders("routes", ("gateway",), skip="training") == {}


def test_building_the_app_loads_no_offline_tool_and_no_test_double() -> None:
    """In a fresh interpreter, as a pod starts: the app is built and what it loaded is listed."""
    script = (
        "import json, sys\nfrom gateway.app import create_app\ncreate_app()\nprint(json.dumps(sorted(sys.modules)))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert "gateway.app" in loaded  # the listing is the app's
    offline = [m for m in loaded if m.startswith(OFFLINE) or "scripted" in m or "fake" in m.split(".")[-1]]
    assert offline == []
