"""``python -m routes.offline.eval --dataset FILE --mode plain,corrective,adaptive [--limit N]``

Ingests the dataset's corpus into a fresh tenant of an in-process gateway (configured from the
environment like the service: the local model by default), runs every question in every mode and
writes ``<out>/<dataset>-report.json`` and ``<out>/<dataset>-chart.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.settings import Settings
from routes.offline.eval.datasets import load
from routes.offline.eval.report import draw_chart, resumed, summarised, write
from routes.offline.eval.runner import Mode, Outcome, ask, first_retrieval, ingest, route_of
from routes.offline.eval.sampling import pick, seed_and_limit, unasked
from routes.offline.eval.tables import render


async def run(args: argparse.Namespace) -> dict[str, Any]:
    dataset = load(args.dataset)
    modes = cast(list[Mode], args.mode.split(","))
    store = args.store or Path(tempfile.mkdtemp(prefix="eval-lancedb-"))
    # No response cache: every mode must compute its answers for the figures to mean anything.
    settings = Settings().replace(vector_store={"path": store}, cache={"enabled": False})
    app = create_app(settings)
    # A kept store holds one tenant per dataset file, ingested by the first run that used it.
    tenant = f"eval-{dataset.name}" if args.store else f"eval-{dataset.name}-{int(time.time())}"
    marker = store / f".ingested-{tenant}-{args.dataset.stem}"
    report: dict[str, Any] = {"dataset": dataset.name, "file": str(args.dataset)}
    async with AsyncTestClient(app, timeout=900) as client:
        report["model"] = settings.llm.model
        if marker.exists():
            report["ingest"] = json.loads(marker.read_text()) | {"reused": str(store)}
        else:
            chunks, seconds = await ingest(client, tenant, dataset)
            report["ingest"] = {"documents": len(dataset.documents), "chunks": chunks, "seconds": round(seconds, 1)}
            if args.store:
                marker.write_text(json.dumps(report["ingest"]))
        kinds = set(args.kind.split(",")) if args.kind else None
        asked = [
            q
            for q in dataset.questions
            if (q.answerable or not args.answerable) and (kinds is None or {q.kind, q.kind.split("-")[0]} & kinds)
        ]
        pool = [
            (q, await first_retrieval(app.state.knowledge, settings.retrieval.default_top_k, tenant, q)) for q in asked
        ]
        fresh = unasked(pool, args.where, args.not_in_sample)
        picked = pick(fresh, args.where, args.limit, args.seed if args.sample else None)
        questions = [question for question, _ in picked]
        firsts = [first for _, first in picked]
        report["questions"] = len(questions)
        report["where"] = args.where
        if args.route_only:
            # The router's decisions alone (POST /v1/route: the probe search, no model call).
            decisions = [await route_of(client, tenant, question) for question in questions]
            report["summary"] = {"route_only": {"questions": len(questions), "routes": dict(Counter(decisions))}}
            routed = [{"question_id": q.id, "route": r} for q, r in zip(questions, decisions, strict=True)]
            report["outcomes"] = {"route_only": routed}
            return report
        await require_model(client)
        done = resumed(args.resume) if args.resume else {}
        per_mode: dict[str, list[Outcome]] = {mode: [] for mode in modes}
        # Each question in every mode before the next question: a run cut short compares the modes on the same
        # questions, and the local server still holds the last prompt when the next mode starts with the same one
        # (the corrective route's first call is plain RAG's own prompt).
        for n, (question, first) in enumerate(zip(questions, firsts, strict=True), start=1):
            for mode in modes:
                outcomes = per_mode[mode]
                outcome = done.get((mode, question.id)) or await ask(client, tenant, question, mode, first)
                outcomes.append(outcome)
                summarised(report, per_mode)
                write(report, args.out, partial=True)  # a run cut short keeps what it measured
                if args.verbose:
                    print(
                        f"[{mode} {n}/{len(questions)}] in_reply={outcome.answer_contained:.0f} f1={outcome.f1:.2f} "
                        f"route={outcome.route} calls={outcome.llm_calls} {outcome.latency_ms:.0f}ms",
                        flush=True,
                    )
        summarised(report, per_mode)
    return report


async def require_model(client: AsyncTestClient[Any]) -> None:
    """Stop before the first question when the model endpoint is down: otherwise every question "fails" in
    milliseconds (the breaker opens after five) and the run writes a report of zeros that looks like a result."""
    ready = (await client.get("/readyz")).json()
    llm = ready.get("checks", {}).get("llm", "missing")
    if llm != "ok":
        raise SystemExit(
            f"the LLM endpoint is not ready ({llm}); start it (python -m routes.offline.local_llm serve) "
            "or set GATEWAY_LLM_BASE_URL"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset",
        type=Path,
        required=True,
        help="HotpotQA (with *_corpus.json), SQuAD v2 JSON or the written KB (routes/data/written_kb.json)",
    )
    parser.add_argument(
        "--mode", default="plain,corrective,adaptive", help="comma-separated: plain,corrective,adaptive"
    )
    parser.add_argument("--limit", type=int, default=0, help="run only N questions")
    parser.add_argument("--sample", action="store_true", help="pick the N questions at random (with --seed)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--where",
        choices=["all", "missed", "complete"],
        default="all",
        help="only questions whose first top-k missed a gold passage (missed) or held them all (complete)",
    )
    parser.add_argument(
        "--not-in-sample",
        type=seed_and_limit,
        action="append",
        default=[],
        metavar="SEED:N",
        help="leave out the questions an earlier `--sample --seed SEED --limit N` run asked (repeatable): a held-out "
        "sample no run has used",
    )
    parser.add_argument("--answerable", action="store_true", help="only questions with a gold answer (SQuAD v2)")
    parser.add_argument(
        "--kind",
        default="",
        help="only questions of these comma-separated kinds (bridge,comparison; written KB: also bridge-ja)",
    )
    parser.add_argument(
        "--route-only", action="store_true", help="only ask POST /v1/route for each question: the routes, no answers"
    )
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument(
        "--store",
        type=Path,
        help="keep the vector store in this directory and reuse its ingested corpus in later runs (default: fresh)",
    )
    parser.add_argument(
        "--resume",
        type=Path,
        help="a partial report of the same run cut short: its questions are not asked again (same arguments)",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    report = asyncio.run(run(args))
    path = write(report, args.out)
    print(json.dumps(report["summary"], indent=2))
    if args.route_only:
        return
    stem = path.name.removesuffix("-report.json")
    draw_chart(
        report["summary"],
        f"{report['dataset']} ({report['questions']} questions, {report['model']})",
        args.out / f"{stem}-chart.png",
    )
    print(render(report["summary"]))
    print(f"wrote {args.out / (stem + '-report.json')} and {args.out / (stem + '-chart.png')}")


if __name__ == "__main__":
    main()
