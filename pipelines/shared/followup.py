"""Follow-up rewriting: one model call that makes the last turn of a conversation self-contained.

Routing, retrieval and the caches all work on one question. "And what about its population?"
means nothing to any of them, so before routing the earlier turns are used to rewrite it into
"What is the population of Paris?"; that rewrite is what gets routed, retrieved and cached.
A plain completion, not structured output: the answer is one line of text, and a grammar buys a
small model nothing there. Output that does not look like a question rewrite (empty, a paragraph)
falls back to the user's own words, which is never worse than no rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from langchain_core.messages import HumanMessage, SystemMessage

from pipelines.shared.deps import ChatClient, LLMCall

NODE = "rewrite_followup"
MAX_TOKENS = 96
MAX_TURN_CHARS = 1_000

SYSTEM = (
    "You rewrite the last message of a conversation into a standalone question that can be understood "
    "without the conversation. Replace pronouns and references (it, its, they, that, there, he, she) with "
    "what they refer to in the earlier turns. Keep the user's language and intent; add nothing else. "
    "If the last message is already standalone, return it unchanged. "
    "Reply with the rewritten question only: no preamble, no quotes, no answer."
)
USER = "Conversation so far:\n{history}\n\nLast message: {question}\n\nStandalone version of the last message:"


@dataclass(frozen=True, slots=True)
class Turn:
    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True, slots=True)
class FollowupRewrite:
    query: str
    call: LLMCall
    changed: bool


def _history(turns: list[Turn]) -> str:
    lines = []
    for turn in turns:
        text = " ".join(turn.text.split())
        if len(text) > MAX_TURN_CHARS:
            text = text[:MAX_TURN_CHARS] + " ..."
        lines.append(f"{'User' if turn.role == 'user' else 'Assistant'}: {text}")
    return "\n".join(lines)


def _clean(output: str, question: str) -> str:
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    if not lines:
        return question
    text = lines[0]
    for prefix in ("Standalone version of the last message:", "Standalone question:", "Rewritten question:"):
        if text.lower().startswith(prefix.lower()):
            text = text[len(prefix) :].strip()
    text = text.strip().strip("\"'“”「」").strip()
    # A rewrite adds the referent, a few words; a paragraph means the model answered instead.
    if not text or len(text) > 2 * len(question) + 200:
        return question
    return text


async def rewrite_followup(llm: ChatClient, turns: list[Turn], question: str) -> FollowupRewrite:
    """``turns`` are the earlier user/assistant turns (non-empty: single-turn requests skip this)."""
    messages = [SystemMessage(SYSTEM), HumanMessage(USER.format(history=_history(turns), question=question))]
    reply = await llm.chat(messages, node=NODE, max_tokens=MAX_TOKENS)
    query = _clean(reply.text, question)
    return FollowupRewrite(query=query, call=reply.call, changed=query != question)
