"""``python -m gateway.local_llm prepare|serve``: the embedded LLM for ``make run`` and tests."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

from gateway.local_llm.model import MODELS, default_model_dir, prepare
from gateway.local_llm.server import ServerConfig, find_binary, is_healthy, wait_until_healthy

DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.local_llm")
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
    args = parser.parse_args()

    model_path = prepare(args.model, args.dir)
    if args.command == "prepare":
        print(model_path)
        return
    if is_healthy(args.host, args.port):
        print(f"llama-server already answering on {args.host}:{args.port}; reusing it", flush=True)
        signal.pause()
        return
    config = ServerConfig(model_path=model_path, host=args.host, port=args.port)
    print(f"starting {find_binary()} on {config.base_url}", flush=True)
    process = subprocess.Popen(config.command())

    def forward(signum: int, _frame: object) -> None:
        process.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        wait_until_healthy(args.host, args.port, args.ready_timeout, process)
        print(f"llama-server ready on {config.base_url}", flush=True)
        sys.exit(process.wait())
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=15)


if __name__ == "__main__":
    main()
