"""The gateway starts and serves on a read-only root filesystem, as the image and the chart run it.

A private mount namespace (``unshare -m``, root only) makes every filesystem read-only except the two
volumes the chart mounts (/tmp and /data, here two temporary directories); the environment is the
Dockerfile's, with those two paths mapped. The router artefact is built first by the same command the
image build runs, so start-up must load it rather than train.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.deploy.chart_tools import REPO
from tests.deploy.test_container import ENTRYPOINT, env_of_final_stage
from tests.ports import free_port

NAMESPACE_SCRIPT = """
set -eu
mount --bind "$SCRATCH" "$SCRATCH"
mount --bind "$DATA" "$DATA"
for target in / "$(stat -c %m "$ROUTER_DIR")" "$(stat -c %m "$REPO")"; do
  mount -o remount,bind,ro "$target"
done
if touch "$ROUTER_DIR/write-probe" 2>/dev/null; then echo "root filesystem still writable" >&2; exit 99; fi
cd /
exec sh "$ENTRYPOINT" "$PYTHON" -m gateway
"""


def namespaces_available() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode == 0
    except FileNotFoundError:
        return False


pytestmark = pytest.mark.skipif(
    not namespaces_available(), reason="needs `unshare -m` (root with CAP_SYS_ADMIN) to make / read-only"
)


@pytest.fixture(scope="module")
def router_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image build step: ``python -m gateway.query.router_artefact`` with the image's router directory."""
    target = tmp_path_factory.mktemp("router")
    subprocess.run(
        [sys.executable, "-m", "gateway.query.router_artefact"],
        env={**os.environ, "GATEWAY_ROUTER_CACHE_DIR": str(target)},
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert len(list(target.glob("knowledge-router-*.npz"))) == 2  # retrieve and spread stages
    assert len(list(target.glob("calibration-*.json"))) == 1  # the default embedder's scorers and thresholds
    return target


def container_env(scratch: Path, data: Path, router_dir: Path, port: int) -> dict[str, str]:
    def volume_path(value: str) -> str:
        # Paths and URLs holding a path (sqlite+aiosqlite:////data/curation.db) both move to the test's folders:
        # nothing may write to the host's /data.
        for mount, local in (("/tmp", scratch), ("/data", data)):
            if value == mount or value.startswith(mount + "/"):
                return str(local) + value[len(mount) :]
            if ":///" + mount + "/" in value:
                return value.replace(":///" + mount + "/", ":///" + str(local) + "/", 1)
        return value

    env = {name: volume_path(value) for name, value in env_of_final_stage().items() if name != "PATH"}
    env.update(
        PATH=os.environ["PATH"],
        GATEWAY_HOST="127.0.0.1",
        GATEWAY_PORT=str(port),
        GATEWAY_ROUTER_CACHE_DIR=str(router_dir),
        GATEWAY_LLM_BASE_URL="http://127.0.0.1:9/v1",  # nothing listens: readiness reports it, start-up goes on
        SCRATCH=str(scratch),
        DATA=str(data),
        ROUTER_DIR=str(router_dir),
        REPO=str(REPO),
        ENTRYPOINT=str(ENTRYPOINT),
        PYTHON=sys.executable,
        PYTHONPATH=str(REPO),  # this checkout's code, even when the venv's editable install is another's
    )
    return env


def upsert_one_document(base: str, tenant: str) -> None:
    """One document through the API: the embedding model runs and LanceDB writes to the data volume."""
    upsert = httpx.post(
        f"{base}/v1/documents",
        json={"tenant": tenant, "documents": [{"id": "d1", "title": "Leave", "text": "Staff get 25 days of leave."}]},
        timeout=60,
    )
    assert upsert.status_code in (200, 201), upsert.text
    assert upsert.json()["upserted"] == 1


def test_gateway_serves_and_drains_on_a_read_only_root(tmp_path: Path, router_dir: Path) -> None:
    scratch, data = tmp_path / "tmp", tmp_path / "data"
    scratch.mkdir()
    data.mkdir()
    port = free_port()
    log_path = tmp_path / "gateway.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", NAMESPACE_SCRIPT],
            env=container_env(scratch, data, router_dir, port),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)

        upsert_one_document(base, tenant="ro")
        ready = httpx.get(f"{base}/readyz", timeout=10).json()
        assert ready["checks"]["vector_store"] == "ok"
        route = httpx.post(f"{base}/v1/route", json={"query": "What is 2 + 2?"}, timeout=10)
        assert route.status_code in (200, 201), route.text
    finally:
        proc.send_signal(signal.SIGTERM)  # the entrypoint exec'd: this is uvicorn itself
        returncode = proc.wait(timeout=60)
    log_text = log_path.read_text()
    # uvicorn drains, then re-raises the signal it caught, so the exit status says "terminated by SIGTERM".
    assert returncode in (0, -signal.SIGTERM), log_text
    assert "Application shutdown complete" in log_text
    assert "Finished server process" in log_text
    assert "training the router" not in log_text  # the artefact built "at image build" was used
    assert "could not cache" not in log_text
    assert any(data.rglob("*")), "LanceDB wrote nothing to the data volume"
    assert not (router_dir / "write-probe").exists()
    print("\nread-only start, last log lines:", *log_text.splitlines()[-4:], sep="\n  ")
