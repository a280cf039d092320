"""The project's wheel, built as the Dockerfile's ``pip install .`` builds it, for the packaging test and the
benchmark that counts what it carries."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PACKAGES = ("gateway", "routes", "pipelines")


def build_wheel(source: Path, out: Path) -> Path:
    """The wheel of the checkout at ``source``, written to ``out``. Built from a copy of what the Dockerfile copies
    (setuptools writes its build folders beside the sources), with no build isolation: nothing is fetched."""
    copy = out / "source"
    for package in PACKAGES:
        shutil.copytree(source / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(source / name, copy)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(copy)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = out.glob("rag_gateway-*.whl")
    return wheel
