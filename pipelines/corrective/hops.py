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

from pipelines.corrective.prompts import FOUND_FACTS, HOP_SYSTEM, HOP_USER
from pipelines.shared.deps import ChatClient, LLMCall, Passage, StructuredOutputError

EVIDENCE_CHARS = 600  # per passage: the planner needs the entity, not every detail
MAX_PASSAGES = 4


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
    """
    return f"{question}\n{FOUND_FACTS.format(facts='; '.join(facts))}" if facts else question


async def plan_next_hop(llm: ChatClient, question: str, evidence: list[Passage], tried: list[str]) -> Hop:
    """The next search query, or "" when the evidence suffices (or the planner's output was unusable)."""
    messages = [
        SystemMessage(HOP_SYSTEM),
        HumanMessage(
            HOP_USER.format(question=question, evidence=evidence_text(evidence), tried="; ".join(tried[-3:]) or "-")
        ),
    ]
    try:
        hop, call = await llm.structured(messages, NextHop, node="plan_hop")
    except StructuredOutputError as exc:
        return Hop("", "", exc.call)
    query, found = clean_query(hop.next_query), hop.found.strip()
    if query.casefold() in {t.strip().casefold() for t in tried}:
        query = ""  # asking again for what was searched finds nothing new
    return Hop(query, found if found.casefold() not in {"", "none"} else "", call)


# A small model sometimes runs its "found" field on into the query ("…? Found: 1 file per minute, …"): the
# tail is evidence, not something to search for, and it drags the search toward what was already found.
_LEAKED_FIELD = re.compile(r"\s*\b(?:found|evidence)\s*[:：?].*$", re.IGNORECASE | re.DOTALL)


def clean_query(text: str) -> str:
    """The planner's query without quotes and without a leaked field tail."""
    return _LEAKED_FIELD.sub("", text.strip().strip('"')).strip()
