"""Multi-hop as iterative retrieval (IRCoT, self-ask): the model names the next thing to look up.

After each evaluated retrieval the model reads the evidence so far and either says it suffices or
writes the next sub-question, naming the bridge entity the evidence found ("Where was Christopher
Nolan born?" once a passage says Nolan directed the film). The pipeline retrieves for it from the
tenant's store, CRAG's evaluator judges that round against the sub-question, and the loop goes on
up to ``max_hops``. Unlike the rewrite after a failed answer, the hop is planned before any answer
is generated, so a bridge question costs one planning call per hop instead of a generation, two
critics and a rewrite.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from pipelines.corrective.prompts import FOUND_FACTS, HOP_EXAMPLE, HOP_SYSTEM, HOP_USER, written_in
from pipelines.shared import (
    ChatClient,
    LLMCall,
    Passage,
    StructuredOutputError,
    compose,
    lexical_support,
    question_language,
    terms,
)

EVIDENCE_CHARS = 600  # per passage: the planner needs the entity, not every detail
MAX_PASSAGES = 4
# How much of a fact's own terms (beyond the question's) a passage must hold to be the one it came from:
# the grader's test of its "fact" field (:func:`pipelines.corrective.evaluator.grade`).
FACT_SUPPORT = 0.6


class NextHop(BaseModel):
    """``found`` comes first so the model commits to what the evidence says before asking for more."""

    found: str = Field(default="", max_length=240)
    next_query: str = Field(default="", max_length=200)


def evidence_text(evidence: list[Passage]) -> str:
    chosen = sorted(evidence, key=lambda p: -p.score)[:MAX_PASSAGES]
    return "\n".join(f"- ({p.title}) {p.text[:EVIDENCE_CHARS]}" for p in chosen) or "- nothing yet"


@dataclass(frozen=True, slots=True)
class Hop:
    query: str  # the next sub-question, "" when the evidence suffices
    found: str  # the fact of the evidence it builds on, "" if none
    call: LLMCall | None


def with_found_facts(question: str, facts: list[str]) -> str:
    """The question as the generator sees it after hops: with the chain of facts the planner found.

    A small model given the bridge page and the second-hop page often answers from the wrong row of
    the second (the Standard plan's API limit instead of the Business plan's); the chain names the row.
    The frame stays English for a Japanese question: framed in Japanese ("これまでに分かった事実"), the local
    model given both pages and the fact "ビジネスプランは1ユーザーあたり50GBである" answered the Enterprise row.
    """
    return f"{question}\n{FOUND_FACTS.format(facts='; '.join(facts))}" if facts else question


def planner_language(question: str) -> str:
    """The planner's language rule, with its example in that language where one is written (:data:`HOP_EXAMPLE`)."""
    rule = written_in(question, '"found" and "next_query"')
    example = HOP_EXAMPLE.get(question_language(question) or "", "")
    return f"{rule} {example}".strip()


async def plan_next_hop(llm: ChatClient, question: str, evidence: list[Passage], tried: list[str]) -> Hop:
    """The next search query, or "" when the evidence suffices (or the planner's output was unusable)."""
    messages = [
        SystemMessage(compose(HOP_SYSTEM, planner_language(question))),
        HumanMessage(
            HOP_USER.format(question=question, evidence=evidence_text(evidence), tried="; ".join(tried[-3:]) or "-")
        ),
    ]
    try:
        hop, call = await llm.structured(messages, NextHop, node="plan_hop")
    except StructuredOutputError as exc:
        return Hop("", "", exc.call)
    query, found = clean_query(hop.next_query), hop.found.strip()
    if _comparable(query) in {_comparable(t) for t in tried}:
        query = ""  # asking again for what was searched finds nothing new
    return Hop(query, found if found.casefold() not in {"", "none"} else "", call)


def holds_fact(found: str, question: str, passage: Passage) -> bool:
    """Whether ``passage`` holds the planner's fact: terms beyond the question's, and enough of them in it."""
    if not found:
        return False
    support = lexical_support(found, question, [passage.text])
    return support.novel_terms > 0 and support.supported(FACT_SUPPORT)


def bridges(found: str, question: str, rejected: list[Passage], *, have_evidence: bool) -> list[Passage]:
    """The passages the evaluator rejected that hold the fact the planner built its next query on.

    A bridge page names the entity, not the answer, so the grader rightly finds it irrelevant to the
    question; yet the answer rests on it ("the 50 GB plan is Business" before "Business allows 300
    calls"), and without it the generator sees the second hop alone and picks the wrong row. The fact
    must add terms beyond the question's and the passage must hold them, as the grader's fact must.
    """
    kept = [passage for passage in rejected if holds_fact(found, question, passage)]
    if not kept and not have_evidence and rejected:
        kept.append(max(rejected, key=lambda p: p.score))
    return kept


# A clause ends at a sentence's end or at a comma: a bridge sentence often lists every row ("Free has 1 GB,
# Standard 10 GB per user, Business 50 GB per user."), and only one of them is the row the question means.
_CLAUSE_END = re.compile(r"(?<=[。．.!?！？、,;；])\s*")


def bridge_fact(question: str, bridge: Passage) -> str:
    """The bridge's clause sharing most terms with the question (the shorter on a tie), "" if none shares any.
    A clause that adds nothing to the question is no fact: "「朝霧の渡し」は" (the painting's name, cut at the
    Japanese comma) shares most with a question naming the painting and says nothing the question does not.

    The fact a next hop builds on, when the planner did not name it: the generator then reads which row of
    the second hop's page the question is about (:func:`with_found_facts`).
    """
    asked = terms(question)
    clauses = [c.strip(" 、,") for c in _CLAUSE_END.split(bridge.text) if c.strip(" 、,")]
    scored = [(len(found & asked), -len(c), c) for c in clauses if (found := terms(c)) - asked]
    shared, _, clause = max(scored, default=(0, 0, ""))
    return clause if shared else ""


# A small model sometimes runs its "found" field on into the query ("…? Found: 1 file per minute, …", or a
# bare "…? found"): the tail is evidence, not something to search for, and it drags the search toward what
# was already found. Only after a sentence's end or before a colon: "Where was the ring found?" is a query.
_LEAKED_FIELD = re.compile(
    r"(?:(?<=[?？.。!！])\s*\b(?:found|evidence)\b.*$)|(?:\s*\b(?:found|evidence)\s*[:：].*$)",
    re.IGNORECASE | re.DOTALL,
)
_EDGE_PUNCTUATION = " \t\n\"'?？.。!！、,"


def clean_query(text: str) -> str:
    """The planner's query without quotes and without a leaked field tail."""
    return _LEAKED_FIELD.sub("", text.strip().strip('"')).strip()


def _comparable(query: str) -> str:
    """A query as compared with those already searched: case and edge punctuation do not make it new."""
    return query.strip(_EDGE_PUNCTUATION).casefold()
