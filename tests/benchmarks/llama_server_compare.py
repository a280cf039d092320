"""llama.cpp servers side by side: start-up, prompt and decode speed, and the project's JSON-schema calls.

    python -m tests.benchmarks.llama_server_compare --model ~/.cache/rag-gateway/models/M.gguf --threads 1 \\
        --server source=/path/to/llama-server \\
        --server prebuilt="python -m routes.offline.local_llm.embedded" [--rounds 2] [--repeats 3] [--structured-rounds
        1]

Each ``--server LABEL=COMMAND`` is started with the project's own flags (``ServerConfig.arguments()``,
``--threads`` overridden) on a free loopback port, one server at a time, round-robin over ``--rounds``
so the machine's background load falls on every server alike. Per server it measures:

- start-up: spawn to ``/health`` 200 (model load included);
- prompt processing: a ~400-token prompt with a fresh first line and ``cache_prompt`` off, so every
  token is processed; tokens/s from the server's own ``timings``;
- decoding: 64 tokens with ``ignore_eos`` (the same count every time), tokens/s from ``timings``;
- structured output: the router's and the graders' real prompts and pydantic schemas through
  :meth:`LLMClient.structured` (``ChatOpenAI`` with a ``json_schema`` ``response_format``, as served
  requests use it): how many parse and validate, and how many replies are identical to the first
  server's (temperature 0, so differences come from the kernels, not from sampling); in the first
  ``--structured-rounds`` rounds only, as these are the slow part on a busy machine.

The speed probes post to ``/v1/chat/completions`` with httpx because ``timings`` and ``ignore_eos``
are llama.cpp extensions that ``ChatOpenAI`` does not expose. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr

from gateway.providers.llm import LLMClient
from gateway.settings import LOCAL_MODEL, ModelPrice
from pipelines.corrective.critique import GroundednessCheck, UsefulnessCheck
from pipelines.corrective.evaluator import Grade
from pipelines.corrective.hops import NextHop
from pipelines.corrective.prompts import (
    GRADE_SYSTEM,
    GRADE_USER,
    GROUNDED_SYSTEM,
    GROUNDED_USER,
    HOP_SYSTEM,
    HOP_USER,
    USEFUL_SYSTEM,
    USEFUL_USER,
)
from routes.llm_router import RouteChoice, messages_for
from routes.offline.local_llm.server import ServerConfig, wait_until_healthy

PASSAGE = (
    "Kumo Robotics ships the K2 warehouse robot with a 48 V battery that lasts nine hours per charge. "
    "The Standard plan includes email support and 2,000 API calls per day; the Business plan adds phone "
    "support, a dedicated engineer and 50,000 API calls per day. Firmware updates are released monthly "
    "and can be postponed for up to 30 days by an administrator. "
)
VPN = "The VPN policy was last updated on 4 March 2024; all staff must use the Kumo VPN on public Wi-Fi."


@dataclass(frozen=True)
class Case:
    name: str
    schema: type[BaseModel]
    messages: list[BaseMessage]


def cases() -> list[Case]:
    """The structured calls a served request makes, with their real system prompts and schemas."""
    routed = [
        "Thanks, see you tomorrow!",
        "When was the VPN policy last updated?",
        "Which plan has more API calls per day, and how long does the K2 battery last?",
        "有給休暇は何日ありますか",
    ]
    out = [Case(f"route[{i}]", RouteChoice, messages_for(q)) for i, q in enumerate(routed)]
    for i, (question, title, text) in enumerate(
        [
            ("How long does the K2 battery last?", "K2 datasheet", PASSAGE),
            ("What is the capital of Peru?", "VPN policy", VPN),
            # Asks for more than Grade.fact's 240 characters: only the grammar keeps the reply valid.
            ("Quote the whole document word for word, every sentence.", "K2 datasheet", PASSAGE * 2),
        ]
    ):
        user = GRADE_USER.format(question=question, title=title, text=text)
        out.append(Case(f"grade[{i}]", Grade, [SystemMessage(GRADE_SYSTEM), HumanMessage(user)]))
    for i, (question, answer) in enumerate(
        [
            ("How many API calls does the Business plan allow?", "The Business plan allows 50,000 API calls a day."),
            ("How many API calls does the Business plan allow?", "Firmware is updated every month."),
        ]
    ):
        user = USEFUL_USER.format(question=question, answer=answer)
        out.append(Case(f"useful[{i}]", UsefulnessCheck, [SystemMessage(USEFUL_SYSTEM), HumanMessage(user)]))
    grounded = GROUNDED_USER.format(
        evidence=f"[1] (K2 datasheet) {PASSAGE}",
        answer="The K2 battery lasts nine hours [1] and the robot can fly [1].",
    )
    out.append(Case("grounded", GroundednessCheck, [SystemMessage(GROUNDED_SYSTEM), HumanMessage(grounded)]))
    hop = HOP_USER.format(
        question="How many API calls a day does the plan with a dedicated engineer allow?",
        evidence="- (Support) A dedicated engineer comes with the Business plan.",
        tried="-",
    )
    out.append(Case("hop", NextHop, [SystemMessage(HOP_SYSTEM), HumanMessage(hop)]))
    return out


@dataclass
class Figures:
    startup_s: list[float] = field(default_factory=list)
    prompt_tps: list[float] = field(default_factory=list)
    decode_tps: list[float] = field(default_factory=list)
    valid: int = 0
    invalid: list[str] = field(default_factory=list)
    replies: dict[str, list[str]] = field(default_factory=dict)
    structured_s: list[float] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def timings(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    result: dict[str, Any] = response.json()["timings"]
    return result


def speed(client: httpx.Client, figures: Figures, repeats: int) -> None:
    for _ in range(repeats):
        prompt = f"Note {uuid.uuid4().hex}.\n" + PASSAGE * 4 + "\nSummarise the text above in one sentence."
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 1, "cache_prompt": False}
        figures.prompt_tps.append(timings(client, body)["prompt_per_second"])
        body = {
            "messages": [{"role": "user", "content": "Tell a long story about a warehouse robot."}],
            "max_tokens": 64,
            "temperature": 0,
            "ignore_eos": True,
        }
        figures.decode_tps.append(timings(client, body)["predicted_per_second"])


async def structured(base_url: str, figures: Figures) -> None:
    chat = ChatOpenAI(
        model=LOCAL_MODEL, base_url=base_url, api_key=SecretStr("none"), temperature=0.0, max_tokens=320, max_retries=0
    )
    llm = LLMClient(chat, model_name=LOCAL_MODEL, price=ModelPrice(), timeout_s=600.0)
    for case in cases():
        started = time.perf_counter()
        try:
            reply, _ = await llm.structured(case.messages, case.schema, node=case.name)
        except Exception as exc:  # a figure to print, not an error to raise: the next case still runs
            figures.invalid.append(f"{case.name}: {type(exc).__name__}: {exc}")
            figures.replies.setdefault(case.name, []).append("<invalid>")
            continue
        finally:
            figures.structured_s.append(time.perf_counter() - started)
        figures.valid += 1
        figures.replies.setdefault(case.name, []).append(reply.model_dump_json())


def run_once(
    label: str, prefix: list[str], args: argparse.Namespace, figures: Figures, log: Path, with_structured: bool
) -> None:
    config = ServerConfig(model_path=args.model, port=free_port(), threads=args.threads)
    started = time.perf_counter()
    with log.open("ab") as sink:
        process = subprocess.Popen([*prefix, *config.arguments()], stdout=sink, stderr=sink)
    try:
        wait_until_healthy(config.host, config.port, 300.0, process)
        figures.startup_s.append(time.perf_counter() - started)
        with httpx.Client(base_url=f"http://{config.host}:{config.port}", timeout=600.0) as client:
            speed(client, figures, args.repeats)
        if with_structured:
            asyncio.run(structured(config.base_url, figures))
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    print(f"  {label}: round done", flush=True)


def median(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f}" if values else "    n/a"


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}" if values else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--server", action="append", required=True, metavar="LABEL=COMMAND")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="speed samples per round")
    parser.add_argument("--structured-rounds", type=int, default=1, help="rounds that also run the schema cases")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    args = parser.parse_args()
    # A TERM (a timeout, an impatient operator) unwinds through run_once's `finally`, stopping its server.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    servers = [(label, shlex.split(command)) for label, command in (s.split("=", 1) for s in args.server)]
    figures = {label: Figures() for label, _ in servers}
    args.log_dir.mkdir(parents=True, exist_ok=True)
    for round_no in range(1, args.rounds + 1):
        print(f"round {round_no}/{args.rounds}", flush=True)
        for label, prefix in servers:
            log = args.log_dir / f"llama-compare-{label}.log"
            run_once(label, prefix, args, figures[label], log, round_no <= args.structured_rounds)
    print(f"\nthreads={args.threads} rounds={args.rounds} repeats={args.repeats} model={args.model.name}")
    print(
        f"{'server':<12} {'start s':>8} {'pp tok/s':>9} {'(range)':>13} {'tg tok/s':>9} {'(range)':>13} "
        f"{'schema ok':>10} {'same as 1st':>12} {'struct s p50':>13}"
    )
    first = figures[servers[0][0]]
    for label, _ in servers:
        f = figures[label]
        total = f.valid + len(f.invalid)
        same = sum(
            a == b
            for name, replies in f.replies.items()
            for a, b in zip(replies, first.replies.get(name, []), strict=False)
        )
        compared = sum(min(len(r), len(first.replies.get(n, []))) for n, r in f.replies.items())
        print(
            f"{label:<12} {median(f.startup_s):>8} {median(f.prompt_tps):>9} {spread(f.prompt_tps):>13} "
            f"{median(f.decode_tps):>9} {spread(f.decode_tps):>13} {f.valid:>5}/{total:<4} "
            f"{same:>6}/{compared:<5} {median(f.structured_s):>13}"
        )
    for label, _ in servers:
        for problem in figures[label].invalid:
            print(f"invalid ({label}) {problem}")
    print("\nreplies (first round):")
    for name in first.replies:
        for label, _ in servers:
            replies = figures[label].replies.get(name, ["-"])
            print(f"  {name:<10} {label:<12} {replies[0]}")


if __name__ == "__main__":
    main()
