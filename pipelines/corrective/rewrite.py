"""Query rewriting for the next retrieval round (CRAG's rewrite, multi-hop's follow-up query)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from pipelines.corrective.prompts import REWRITE_EXAMPLES, REWRITE_SYSTEM, REWRITE_USER, written_in
from pipelines.shared import ChatClient, LLMCall, Passage, compose

MAX_QUERY_TOKENS = 48
FOUND_CHARS = 700


async def rewrite_query(
    llm: ChatClient, question: str, found: list[Passage], missing: str, tried: list[str]
) -> tuple[str, LLMCall]:
    summary = "\n".join(f"- ({p.title}) {p.text[:200]}" for p in found[:3])[:FOUND_CHARS] or "- nothing yet"
    prompt = REWRITE_USER.format(
        question=question, found=summary, missing=missing or "unknown", tried="; ".join(tried[-3:])
    )
    messages: list[BaseMessage] = [SystemMessage(compose(REWRITE_SYSTEM, written_in(question, "the search query")))]
    for example, answer in REWRITE_EXAMPLES:
        messages += [HumanMessage(example), AIMessage(answer)]
    messages.append(HumanMessage(prompt))
    reply = await llm.chat(messages, node="rewrite_query", max_tokens=MAX_QUERY_TOKENS)
    query = reply.text.strip().strip('"').splitlines()[0].strip() if reply.text.strip() else question
    return (query or question)[:300], reply.call


def expanded_query(question: str, evidence: list[Passage], chars: int = 300) -> str:
    """The question plus the most relevant evidence found so far (empty when there is none)."""
    if not evidence:
        return ""
    best = max(evidence, key=lambda p: p.score)
    return f"{question} {best.title}: {best.text[:chars]}"
