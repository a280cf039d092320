"""The corrective graph's nodes: module-level functions of ``(state, runtime)``.

Each returns only what it changes; the nodes followed by a choice of route (``evaluate``, ``answer_plainly``,
``plan_hop``, ``refine``, ``check_grounded``, ``check_useful``) also record the choice (:mod:`.routing`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from langgraph.runtime import Runtime

from pipelines.corrective import critique
from pipelines.corrective.evaluator import evaluate_passages
from pipelines.corrective.floor import PlainDraft, keeps_plain
from pipelines.corrective.hops import bridge_fact, bridges, holds_fact, plan_next_hop, with_found_facts
from pipelines.corrective.refine import bounded_context, refine_evidence
from pipelines.corrective.rewrite import expanded_query
from pipelines.corrective.rewrite import rewrite_query as llm_rewrite
from pipelines.corrective.routing import (
    after_evaluate,
    after_grounded,
    after_plan,
    after_refine,
    after_useful,
    budget_stop,
    calls_left,
    can_plan_hop,
    commits,
    decide,
    streams,
    trust_note,
)
from pipelines.corrective.state import AnswerSnapshot, CorrectiveContext, CorrectiveState, merge_passages
from pipelines.shared import (
    AnswerText,
    Check,
    CheckOutcome,
    Draft,
    Evaluate,
    Generate,
    Passage,
    PlanHop,
    Refine,
    Retrieve,
    Rewrite,
    SearchHop,
    SearchMore,
    Stop,
    Update,
    cited_passages,
    draft_answer,
    reciprocal_rank_fusion,
    relevant,
)

Run = Runtime[CorrectiveContext]
HOP_FUSION_DEPTH = 4  # each list of a hop's fused search holds at least this many chunks


async def retrieve(state: CorrectiveState, runtime: Run) -> Update:
    retriever = runtime.context.retriever
    found = await retriever.search(
        state.tenant, state.query, state.top_k, visibility=state.visibility, vector=state.query_vector
    )
    return {"candidates": found, "events": [Retrieve(k=state.top_k, found=len(found))]}


async def evaluate(state: CorrectiveState, runtime: Run) -> Update:
    ctx = runtime.context
    # Keep one call for the answer; grade nothing once the time budget is spent, nor a round the hop
    # planner is about to read when the policy lets its call judge the round (grade_planned_rounds).
    planner_judges = not ctx.policy.grade_planned_rounds and can_plan_hop(state, ctx)
    no_grading = planner_judges or budget_stop(state, ctx) == "max_seconds"
    grading_calls = 0 if no_grading else max(0, calls_left(state, ctx) - 1)
    candidates = state.candidates
    result = await evaluate_passages(
        ctx.llm, ctx.policy, state.query, candidates, grading_calls, scoring_query=state.search_query or state.query
    )
    ctx.telemetry.verdict("corrective", result.verdict)
    # Correct and Ambiguous keep what they found; Incorrect discards this round's documents.
    update: Update = {
        "verdict": result.verdict,
        "verdicts": [result.verdict],
        "evidence": result.kept,
        "confirmed": [p.chunk_id for p in result.confirmed],
        "seen": [p.chunk_id for p in candidates],
        "rounds": [[p.chunk_id for p in candidates]],
        "events": [
            Evaluate(verdict=result.verdict, kept=len(result.kept), total=len(candidates), graded=result.graded)
        ],
        "llm_calls": result.calls,
    }
    if not state.rounds and ctx.policy.answer_passages:
        # What plain RAG answers from on this retrieval: a bounded context starts with it, whatever the
        # fast scorer kept (it drops second-hop passages, which score low against the question).
        update["first_round"] = relevant(candidates[: ctx.policy.answer_passages], ctx.policy.grounding)
    return decide(state, update, ctx, after_evaluate)


async def answer_plainly(state: CorrectiveState, runtime: Run) -> Update:
    """Plain RAG's answer on the first retrieval: the floor no later answer goes below (:mod:`.floor`). Not sent
    while the run goes on; its withheld sentences are reported if it is the answer returned."""
    ctx = runtime.context
    draft = await draft_answer(
        ctx.llm,
        state.query,
        state.first_round,
        node="answer_plainly",
        grounding=ctx.policy.grounding,
        assistant=ctx.assistant,
    )
    plain = PlainDraft(draft, state.first_round)
    update: Update = {
        "plain": plain,
        "events": [Generate(mode="plain", abstention=None if plain.answered else "no plain answer")],
        "llm_calls": [draft.call],
    }
    return decide(state, update, ctx, after_evaluate)


async def plan_hop(state: CorrectiveState, runtime: Run) -> Update:
    """The model names the next sub-question from the evidence so far, or finds it sufficient."""
    ctx = runtime.context
    found = merge_passages(state.evidence, state.candidates)  # rejected candidates too: see can_plan_hop
    hop = await plan_next_hop(ctx.llm, state.query, found, [state.query, *state.queries])
    query = hop.query
    # A next hop built on a page the evaluator rejected makes that page evidence: the answer rests on it too. So
    # does a hop's page the planner read before finding the evidence sufficient (the one holding its fact, else the
    # best): the fast scorer judges a second-hop page against words it lacks ("50GB", "ストレージ") and rejects
    # the very page the planner then answers from.
    kept = {p.chunk_id for p in state.evidence}
    rejected = [p for p in state.candidates if p.chunk_id not in kept]
    if query:
        bridge = bridges(hop.found, state.query, rejected, have_evidence=bool(kept))
    else:
        bridge = bridges(hop.found, state.query, rejected, have_evidence=False) if state.hops else []
    # The fact the next hop builds on: the planner's, if the page it is kept from holds it; else that page's clause
    # closest to the question (a small model's "found" can name another row of the page than the one asked about).
    if hop.found and (not bridge or holds_fact(hop.found, state.query, bridge[0])):
        fact = hop.found
    else:
        fact = bridge_fact(state.query, bridge[0]) if bridge and query else ""
    event = PlanHop(hop=state.hops + 1, query=query, done=not query, found=fact, bridges=len(bridge))
    update: Update = {
        "events": [event],
        "llm_calls": [hop.call] if hop.call else [],
        "hop_facts": [fact] if fact and fact not in state.hop_facts else [],
        "evidence": bridge,
        "bridges": [p.chunk_id for p in bridge],
    }
    if query:
        update |= {"search_query": query, "queries": [query], "hops": state.hops + 1}
    else:
        update["hop_done"] = True
    return decide(state, update, ctx, after_plan)


async def search_hop(state: CorrectiveState, runtime: Run) -> Update:
    """The tenant's store searched for the planned sub-question; CRAG's evaluator judges the round next.

    Fused (reciprocal rank) with two searches that do not depend on the planner: the question itself,
    whose next results past those seen often hold the second hop (its own words, "API" and "per
    minute", name it), and the question expanded by the best evidence so far (ITER-RETGEN's idea, as
    in :func:`search_more`: the bridge's entity). A small model's sub-question can be poor; a chunk
    the lists agree on wins, and the planner's list comes first, so it wins ties.
    """
    retriever = runtime.context.retriever
    # Over-fetch by what is known, or known chunks crowd out the new ones; deep enough for ranks to agree.
    k = max(state.top_k, HOP_FUSION_DEPTH) + len(_known(state))
    expansion = expanded_query(state.query, state.evidence)
    queries = list(dict.fromkeys(q for q in (state.search_query, state.query, expansion) if q))
    # Searched concurrently; the question's own vector, computed for the first retrieval, is not computed again.
    found = await asyncio.gather(
        *(
            retriever.search(
                state.tenant,
                query,
                k,
                visibility=state.visibility,
                vector=state.query_vector if query == state.query else None,
            )
            for query in queries
        )
    )
    fresh = reciprocal_rank_fusion([_unseen(state, ranking) for ranking in found], state.top_k)
    return {"candidates": fresh, "events": [SearchHop(hop=state.hops, k=state.top_k, new=len(fresh))]}


def _known(state: CorrectiveState) -> set[str]:
    return {p.chunk_id for p in state.evidence} | set(state.seen)


def _unseen(state: CorrectiveState, passages: list[Passage]) -> list[Passage]:
    """``passages`` without the chunks evaluated before (searches over-fetch by their number)."""
    known = _known(state)
    return [p for p in passages if p.chunk_id not in known]


async def rewrite_query(state: CorrectiveState, runtime: Run) -> Update:
    ctx = runtime.context
    tried = [state.query, *state.queries]
    query, call = await llm_rewrite(ctx.llm, state.query, state.evidence, state.missing, tried)
    if query.strip().lower() in {t.strip().lower() for t in tried}:
        query = expanded_query(state.query, [*state.evidence, *state.candidates]) or query
    return {
        "search_query": query,
        # A new round of evidence gets its own first answer and its one regeneration.
        "regenerated": False,
        "unsupported_claims": [],
        "queries": [query],
        "rewrites": state.rewrites + 1,
        "events": [Rewrite(round=state.rewrites + 1, query=query)],
        "llm_calls": [call],
    }


async def search_more(state: CorrectiveState, runtime: Run) -> Update:
    """Search with the rewrite and with the question expanded by the best evidence so far.

    The expansion carries the bridge entity of a two-step question (ITER-RETGEN's idea) even
    when a small model's rewrite is poor; both result lists are merged, best first.
    """
    search = runtime.context.search
    queries = [state.search_query]
    # The last round's candidates count too: a bridge document is often judged "not relevant"
    # on its own (it names the entity, not the answer), yet it is what the next hop needs.
    expansion = expanded_query(state.query, [*state.evidence, *state.candidates])
    if expansion and expansion != queries[0]:
        queries.append(expansion)
    known = _known(state)
    found: dict[str, Passage] = {}
    for query in queries:
        # Over-fetch by what is already known, or known chunks would crowd out the new ones.
        found_now = await search.search(state.tenant, query, state.top_k + len(known), visibility=state.visibility)
        for passage in _unseen(state, found_now):
            if passage.score > found.get(passage.chunk_id, passage).score - 1e-9:
                found[passage.chunk_id] = passage
    fresh = sorted(found.values(), key=lambda p: -p.score)[: state.top_k]
    return {"candidates": fresh, "events": [SearchMore(source=search.name, queries=len(queries), new=len(fresh))]}


async def refine(state: CorrectiveState, runtime: Run) -> Update:
    ctx = runtime.context
    strips = await refine_evidence(
        ctx.embedder.embed_texts,
        ctx.policy,
        state.query,
        state.evidence,
        follow_ups=state.queries,
        confirmed=set(state.confirmed),
    )
    if ctx.policy.answer_passages:
        judged = {*state.confirmed, *state.bridges}  # relevant, or the page a hop was planned from
        strips = bounded_context(strips, state.first_round, state.rounds, judged, ctx.policy.hop_passages)
    update: Update = {"strips": strips, "events": [Refine(strips=len(strips), passages=len(state.evidence))]}
    return decide(state, update, ctx, after_refine)


async def generate(state: CorrectiveState, runtime: Run) -> Update:
    """An answer from the refined strips through the sentence gate. A generation the graph will not take back (see
    :func:`~pipelines.corrective.routing.commits`) is *committed*: in a live run its sentences stream as they pass,
    and once one has, the run ends on this answer. Streamed or not, the graph decides alike."""
    ctx = runtime.context
    language = ctx.assistant.answer_language(state.query)
    feedback = critique.regeneration_note(state.unsupported_claims, language)
    committing = commits(state, ctx, regenerating=bool(feedback))
    live = runtime.stream_writer if ctx.live and streams(state, ctx, regenerating=bool(feedback)) else None
    plain = state.plain
    if plain is not None and not feedback and plain.same_context(state.strips):
        # Plain RAG's answer was drafted from these very passages: it is taken again rather than asked for a second
        # time, since another answer from them would not replace it (only evidence it lacked does, see .floor), though
        # the hops' facts would be in this prompt. Live, a committed one is sent now, as the gate cleared it.
        if live is not None and committing and plain.answered:
            for piece in plain.draft.pieces():
                live(AnswerText(piece))
        update = _answered(state, plain.draft, committing, Generate(mode="reuse_plain"))
        return {**update, "regenerated": False}
    draft = await draft_answer(
        ctx.llm,
        with_found_facts(state.query, state.hop_facts),
        state.strips,
        node="generate",
        grounding=ctx.policy.grounding,
        feedback=feedback,
        assistant=ctx.assistant,
        live=live,
    )
    update = _answered(state, draft, committing, Generate(mode="regenerate" if feedback else "answer"))
    return {**update, "regenerated": bool(feedback), "llm_calls": [draft.call]}


def _answered(state: CorrectiveState, draft: Draft, committing: bool, step: Generate) -> Update:
    """The state a generation leaves, ``draft`` its gated text."""
    committed = committing and bool(draft.text) and draft.found
    return {
        "answer": draft.text,
        "sources": draft.cited,
        "context": state.strips,
        "abstained": not draft.found,
        "drafted": draft.judged,
        "committed": committed,
        "answered_with": len(state.evidence),
        # A committed answer's withheld sentences are final now; any other's once the groundedness critic has seen
        # them (it may put them back).
        "events": [step, *(draft.withheld if committed else [])],
    }


async def check_grounded(state: CorrectiveState, runtime: Run) -> Update:
    ctx = runtime.context
    if state.abstained:
        skipped = Check(critic="grounded", outcome="skipped", note="no answer found")
        return decide(state, {"grounded": True, "events": [skipped]}, ctx, after_grounded)
    if state.committed:
        # Every sentence of it passed the gate, and some may have reached the client: no later round takes it back (only
        # plain RAG's draft may replace it at the end, and only when it never streamed: streams()). It is the answer
        # the usefulness critic trusts (commits() chose it so), and the events say so as for any trusted one.
        checks = [
            Check(critic="grounded", outcome="passed"),
            Check(critic="useful", outcome="skipped", note=note_of(state, ctx)),
        ]
        final = {"grounded": True, "useful": True, "best": _snapshot(state), "events": checks}
        return decide(state, final, ctx, after_grounded)
    result = await critique.check_grounded(ctx.llm, state.query, state.drafted, state.strips, calls_left(state, ctx))
    if not result.ok:
        ctx.telemetry.groundedness_failure()
    outcome: CheckOutcome = "passed" if result.ok else "failed"
    update: Update = {
        "answer": result.answer,
        "sources": cited_passages(result.answer, state.strips) or list(state.strips) if result.answer else [],
        "grounded": result.ok,
        "unsupported_claims": result.detail,
        "events": [*result.withheld, Check(critic="grounded", outcome=outcome, claims=tuple(result.detail))],
        "llm_calls": result.calls,
    }
    if result.ok and state.best is None:
        update["best"] = _snapshot(state)
    if not result.ok and state.plain is not None and state.answer == state.plain.draft.text:
        # The critic rejected plain RAG's draft, taken again: it is no floor any more.
        update["plain"] = replace(state.plain, rejected=True)
    note = trust_note(state, ctx)
    if result.ok and note is not None:
        skipped = Check(critic="useful", outcome="skipped", note=note)
        update |= {"useful": True, "best": _snapshot(state), "events": [*update["events"], skipped]}
    return decide(state, update, ctx, after_grounded)


async def check_useful(state: CorrectiveState, runtime: Run) -> Update:
    ctx = runtime.context
    result = await critique.check_useful(ctx.llm, state.query, state.answer, calls_left(state, ctx))
    note = result.detail[0] if result.detail else ""  # what the answer misses, or why it was not checked
    outcome: CheckOutcome = "skipped" if result.skipped else "passed" if result.ok else "failed"
    update: Update = {
        "useful": result.ok,
        "missing": "" if result.skipped else note,
        "events": [Check(critic="useful", outcome=outcome, note=note)],
        "llm_calls": result.calls,
    }
    if result.ok:
        update["best"] = _snapshot(state)
    return decide(state, update, ctx, after_useful)


async def cautious_answer(state: CorrectiveState, runtime: Run) -> Update:
    if state.best is not None:
        # Self-RAG returns the best answer so far: an earlier grounded answer beats a fallback.
        return {**_restored(state.best), "events": [Generate(mode="keep_best")]}
    return {
        "answer": critique.cautious_answer(
            state.query, state.strips, state.unsupported_claims, runtime.context.assistant.language
        ),
        "fallback": True,
        "sources": state.strips[:3],
        "context": state.strips,
        "abstained": True,  # a statement of what the documents say, not an answer
        "events": [Generate(mode="cautious")],
    }


async def finish(state: CorrectiveState, runtime: Run) -> Update:
    if state.stop_reason is None:
        raise RuntimeError("the corrective graph reached finish without a recorded stop reason")
    stop = Stop(reason=state.stop_reason)
    best = state.best
    if best is not None and not state.useful and best.answer != state.answer:
        kept: Update = {**_restored(best), "events": [Generate(mode="keep_best")]}
        answer, context, no_answer = best.answer, best.context, False
    else:
        kept = {"events": []}
        answer, context, no_answer = state.answer, state.context, state.abstained or state.fallback
    plain = state.plain
    # Never an answer a live client has been sent: while plain RAG's answer is the floor, only it streams (streams()).
    min_support = runtime.context.policy.grounding.min_support
    if plain is not None and keeps_plain(plain, state.query, answer, context, no_answer, min_support):
        draft = plain.draft
        floor = AnswerSnapshot(answer=draft.text, sources=draft.cited, context=plain.context)
        events = [Generate(mode="keep_plain"), *draft.withheld, stop]
        return {**_restored(floor), "fallback": False, "events": events}
    return {**kept, "events": [*kept["events"], stop]}


def note_of(state: CorrectiveState, ctx: CorrectiveContext) -> str:
    """Why the usefulness critic is not asked about a committed answer."""
    return trust_note(state, ctx) or ""


def _snapshot(state: CorrectiveState) -> AnswerSnapshot:
    return AnswerSnapshot(answer=state.answer, sources=state.sources, context=state.context)


def _restored(best: AnswerSnapshot) -> Update:
    return {"answer": best.answer, "sources": best.sources, "context": best.context, "abstained": False}
