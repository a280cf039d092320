"""``python -m routes.offline.local_llm prepare|serve|check``: the embedded LLM for ``make run`` and tests."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

from routes.offline.local_llm.model import DEFAULT_MODEL, MODELS, default_model_dir, prepare
from routes.offline.local_llm.server import ServerConfig, find_server, is_healthy, wait_until_healthy

CHECK_TIMEOUT_S = 60.0


def check() -> int:
    """Exit status 0 when a llama.cpp server is installed and starts (``--version``) on this machine.

    ``make install`` runs this after installing the prebuilt wheel and builds llama.cpp from source
    when it fails, so a platform without a usable wheel still gets a server.
    """
    try:
        command = find_server()
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        probe = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"{' '.join(command)} --version failed: {exc}", file=sys.stderr)
        return 1
    # llama-server prints its version on stderr, the embedded server on stdout.
    version = (probe.stdout + probe.stderr).strip().splitlines()
    print(f"{' '.join(command)}: {version[0] if version else 'no version'} (exit {probe.returncode})")
    return probe.returncode


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m routes.offline.local_llm")
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="assemble and verify the GGUF; print its path")
    prep.add_argument("--model", choices=sorted(MODELS), default=DEFAULT_MODEL)
    prep.add_argument("--dir", type=Path, default=default_model_dir())
    serve = sub.add_parser("serve", help="run llama-server in the foreground (reuses one already healthy)")
    serve.add_argument("--model", choices=sorted(MODELS), default=DEFAULT_MODEL)
    serve.add_argument("--dir", type=Path, default=default_model_dir())
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8081)
    serve.add_argument("--ready-timeout", type=float, default=180.0)
    sub.add_parser("check", help="exit 0 if a llama.cpp server is installed and runs here")
    args = parser.parse_args()
    if args.command == "check":
        sys.exit(check())

    model_path = prepare(args.model, args.dir)
    if args.command == "prepare":
        print(model_path)
        return
    if is_healthy(args.host, args.port):
        print(f"an LLM server already answers on {args.host}:{args.port}; reusing it", flush=True)
        signal.pause()
        return
    config = ServerConfig(model_path=model_path, host=args.host, port=args.port)
    command = config.command()
    print(f"starting {' '.join(command[:3])} on {config.base_url}", flush=True)
    process = subprocess.Popen(command)

    def forward(signum: int, _frame: object) -> None:
        process.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        wait_until_healthy(args.host, args.port, args.ready_timeout, process)
        print(f"llama.cpp server ready on {config.base_url}", flush=True)
        sys.exit(process.wait())
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=15)
