"""Schemathesis against a live gateway (scripted model): every operation, no 5xx, responses match the schema.

CI runs it at SCHEMATHESIS_MAX_EXAMPLES=25 per operation; ``make schemathesis`` runs the full 200.
The server is the real app on the scripted chat model (tests/contract/scripted_app.py) with one
admin API key, so generated requests reach the handlers instead of stopping at 401.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.access.keys import hash_key
from tests.ports import free_port

KEY = "rgw-contract-admin-key"
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def live_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    workdir = tmp_path_factory.mktemp("contract")
    entry = f'[{{"name": "contract", "key_sha256": "{hash_key(KEY)}", "tenant": "contract", "scopes": ["admin"]}}]'
    env = {**os.environ, "GATEWAY_API_KEYS": entry, "CONTRACT_WORKDIR": str(workdir)}
    env.pop("REDIS_URL", None)
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "tests.contract.scripted_app:create", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"contract server exited:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"contract server not ready:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_every_operation_conforms_to_the_openapi_schema(live_gateway: str, tmp_path: Path) -> None:
    examples = os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "25")
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or "st"
    command = [
        st,
        "run",
        f"{live_gateway}/schema/openapi.json",
        "--header",
        f"Authorization: Bearer {KEY}",
        "--checks",
        CHECKS,
        "--max-examples",
        examples,
        "--workers",
        "1",
        "--no-color",
        "--generation-database",
        "none",
    ]
    # Run from a scratch directory: schemathesis keeps its crash cache in the working directory.
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False, cwd=tmp_path)
    summary = result.stdout[result.stdout.find("SUMMARY") - 40 :]
    print(summary)  # the run's summary, for `pytest -s` and CI logs
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    schema = httpx.get(f"{live_gateway}/schema/openapi.json", timeout=10).json()
    operations = sum(len(methods) for methods in schema["paths"].values())
    assert operations >= 10
    assert f"Tested: {operations}" in result.stdout  # every operation in the schema was exercised
