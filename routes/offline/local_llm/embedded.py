"""``python -m routes.offline.local_llm.embedded --model M.gguf --port P ...``: llama.cpp's server from a prebuilt
wheel.

The ``xllamacpp`` wheel carries llama.cpp's own HTTP server (the code behind ``llama-server``:
OpenAI-compatible routes, slots, prompt cache, JSON-schema constrained sampling) compiled into a
Python extension, not as an executable. This module gives it ``llama-server``'s command line (the
flags :class:`~routes.offline.local_llm.server.ServerConfig` emits) so the rest of the project starts,
probes and stops either server the same way: a child process that serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Sequence
from typing import Any


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The subset of ``llama-server``'s flags that :class:`ServerConfig` passes, with its defaults."""
    parser = argparse.ArgumentParser(prog="python -m routes.offline.local_llm.embedded", description=__doc__)
    parser.add_argument("--model", help="GGUF file to serve (required unless --version)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=-1, help="-1: llama.cpp picks")
    parser.add_argument("--ctx-size", type=int, default=0, help="total context over all slots; 0: the model's")
    parser.add_argument("--parallel", type=int, default=1, help="slots decoding concurrently")
    parser.add_argument("--alias", default="", help="model name the API reports")
    parser.add_argument(
        "--no-cache-prompt",
        dest="cache_prompt",
        action="store_false",
        help="never reuse a previous prompt's KV cache (slower; decoding no longer depends on what ran before)",
    )
    parser.add_argument("--version", action="store_true", help="print the wheel's version and exit")
    args = parser.parse_args(argv)
    if not args.version and not args.model:
        parser.error("--model is required")
    return args


def server_params(args: argparse.Namespace) -> Any:
    """xllamacpp's ``CommonParams`` (llama.cpp's ``common_params``) for ``args``.

    Prompt processing gets the same thread count as decoding, as ``llama-server --threads`` does.
    """
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cache_prompt = args.cache_prompt
    if args.alias:
        params.model_alias = {args.alias}
    return params


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    # Imported here, not at module level: loading the 100 MB native library is the slow, failure-prone
    # part, and `--help` or a unit test of the flags should not pay for it.
    import xllamacpp

    if args.version:
        print(f"xllamacpp {xllamacpp.__version__}", flush=True)
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    # Constructing the server loads the model and starts listening; dropping it drains and stops it.
    server = xllamacpp.Server(server_params(args))
    print(f"llama.cpp server (xllamacpp {xllamacpp.__version__}) on {server.listening_address}", flush=True)
    stop.wait()
    del server


if __name__ == "__main__":
    main()
