"""What ``pip install .`` installs, and so what the image serves from: the service, nothing that measures.

The wheel is built from this checkout (setuptools, no build isolation: nothing fetched), unpacked, and every module in
it imported with only the unpacked wheel on the path for the project: a service module that needed the evaluation
harness, the training scripts, the local model runner or a test double would fail here, not in a pod.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.wheel_support import build_wheel

REPO = Path(__file__).resolve().parents[2]
# Measuring, training and running a local model happen beside the service, from a checkout.
OFFLINE = ("routes/offline/", "tests/", "gateway/eval/", "gateway/local_llm/", "routes/training/")

IMPORT_ALL = """
import importlib, pkgutil, sys
names = []
for root in ("gateway", "routes", "pipelines"):
    package = importlib.import_module(root)
    assert package.__file__.startswith(sys.argv[1]), package.__file__
    found = pkgutil.walk_packages(package.__path__, root + ".")
    # Entry points run when imported; Alembic's scripts are run by Alembic, in its own context.
    names += [m.name for m in found if not m.name.endswith("__main__") and ".migrations" not in m.name]
for name in names:
    module = importlib.import_module(name)
    for exported in getattr(module, "__all__", ()):  # a package's surface resolves (its stub came along)
        getattr(module, exported)
print(len(names))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(REPO, tmp_path_factory.mktemp("wheel"))


def test_the_wheel_carries_the_service_and_nothing_that_measures(wheel: Path) -> None:
    names = [n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n]
    assert not [n for n in names if n.startswith(OFFLINE)]
    assert not [n for n in names if "memory_store" in n or n.endswith("vectorstores/memory.py")]
    # What the service reads at run time comes with it: router training data, migrations, templates.
    for needed in (
        "routes/data/written_kb.json",
        "routes/data/calibration_rounds.jsonl",
        "gateway/providers/database/migrations/versions/0001_curation_store.py",
        "gateway/providers/database/migrations/script.py.mako",
        "gateway/curation/templates/gaps.html",
        "gateway/knowledge/sample_kb/documents.json",
    ):
        assert needed in names, needed


def test_every_module_of_the_wheel_imports_from_the_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    result = subprocess.run(
        [sys.executable, "-P", "-c", IMPORT_ALL, str(site)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": str(Path(sys.executable).parent)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert int(result.stdout.split()[-1]) > 150  # the service's modules, all of them
