"""A pod's start loads no offline tool and no test double (the import rules themselves: test_import_layers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = ("routes.offline", "tests")


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


def test_the_folder_sync_client_loads_no_server() -> None:
    """``python -m gateway.ingest`` runs on the machine that holds the folders: it reads files and speaks HTTP. Naming
    what it uses of the knowledge package must not load the knowledge base behind it, its store, caches or model."""
    script = "import json, sys\nimport gateway.ingest.cli\nprint(json.dumps(sorted(sys.modules)))\n"
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(json.loads(run.stdout.strip().splitlines()[-1]))
    assert "gateway.knowledge.permissions" in loaded  # the listing is the client's
    server = {"gateway.knowledge.service", "gateway.query", "gateway.platform", "lancedb", "pyarrow", "pinecone"}
    assert server & loaded == set()
    assert not [m for m in loaded if m.startswith(("sqlalchemy", "redis", "onnxruntime", "sklearn", "openai"))]
