"""Grounded answer generation and the checks around it, shared by retrieval pipelines.

Two LLM-free gates keep a small model honest: passages below a relevance floor never reach it
(no call at all when none is left), and each sentence of its answer leaves only when its content is in the
passages (:mod:`pipelines.shared.sentence_gate`); an answer none of whose sentences pass is replaced by a plain
"not in the knowledge base". A streamed run sends each sentence as it passes, through LangGraph's stream writer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.types import StreamWriter

from pipelines.shared.citations import cited_passages
from pipelines.shared.deps import ChatClient, LLMCall, Passage
from pipelines.shared.events import AnswerText, Withhold
from pipelines.shared.judge import JudgeModel
from pipelines.shared.persona import DEFAULT_ASSISTANT, Assistant
from pipelines.shared.prompts import (
    ABSTAIN_EN,
    ABSTAIN_JA,
    ANSWER_CUE,
    ANSWER_CUE_JA,
    GROUNDED_SYSTEM,
    GROUNDED_USER,
)
from pipelines.shared.sentence_gate import Judged, RoundCheck, SentenceGate
from pipelines.shared.text import has_cjk


@dataclass(frozen=True, slots=True)
class GroundingPolicy:
    # A cosine floor, on the embedder's scale: fitted for the one in use (``routes.calibration``), so no default.
    min_relevance: float
    min_support: float = 0.5
    max_tokens: int | None = 200
    # The sentence gate's second test (sentence_gate.RoundCheck): a sentence the round judge scores below this is
    # withheld too; 0 turns it off. ``judge``: the round judge it reads, fitted for the embedder in use (the service
    # sets it from the calibration; a policy that turns the test on needs it).
    judge_below: float = 0.0
    judge: JudgeModel | None = None

    def check(self, passages: list[Passage]) -> RoundCheck | None:
        """The gate's second test over ``passages``, or None when it is off."""
        if self.judge_below <= 0:
            return None
        if self.judge is None:
            raise ValueError("the sentence gate's round test (judge_below > 0) needs the calibration's round judge")
        titles, texts = [p.title for p in passages], [p.text for p in passages]
        return RoundCheck.over(self.judge_below, titles, texts, self.judge)


@dataclass(frozen=True, slots=True)
class GroundedAnswer:
    answer: str
    cited: list[Passage]
    abstained: bool
    call: LLMCall | None
    note: str = ""
    context: list[Passage] = field(default_factory=list)
    withheld: list[Withhold] = field(default_factory=list)


# What a passage may not carry into a prompt: the end of the quoted block, and chat-template markers.
_BREAKOUT = re.compile(r"</?documents>|<\|[a-z_]+\|>|\[/?INST\]|<</?SYS>>", re.IGNORECASE)


def format_context(passages: list[Passage]) -> str:
    """Numbered passages; anything in them that could close the quoted block or open a chat turn is removed,
    so a passage cannot step out of the data it is presented as."""
    return "\n\n".join(f"[{i}] ({_quoted(p.title)}) {_quoted(p.text)}" for i, p in enumerate(passages, start=1))


def _quoted(text: str) -> str:
    return _BREAKOUT.sub(" ", text)


def abstention_for(question: str, assistant: Assistant | None = None) -> str:
    """In the answer's language: the profile's fixed one (Japanese, else English), or the question's."""
    if assistant is not None and assistant.language is not None:
        return ABSTAIN_JA if assistant.language == "ja" else ABSTAIN_EN
    return ABSTAIN_JA if has_cjk(question) else ABSTAIN_EN


def relevant(passages: list[Passage], policy: GroundingPolicy) -> list[Passage]:
    return [p for p in passages if p.score >= policy.min_relevance]


@dataclass(frozen=True, slots=True)
class Draft:
    """A generation through the sentence gate: ``text`` holds the sentences that passed (the abstention when the
    model found nothing, "" when none passed); ``withheld`` says which did not and why."""

    text: str
    cited: list[Passage]
    found: bool
    call: LLMCall
    withheld: list[Withhold] = field(default_factory=list)
    judged: list[Judged] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.found and not self.text

    def pieces(self) -> list[str]:
        """The text sentence by sentence, as the gate sent it to a live client (joined, they are ``text``)."""
        passed = [s for s in self.judged if s.withheld is None]
        return [(s.lead if i else "") + s.text for i, s in enumerate(passed)]

    def emptiness(self) -> str:
        """Why no sentence passed, as the generate step's abstention note says it."""
        if all(w.reason == "states_nothing" for w in self.withheld):
            return "model gave only citations"
        missing = [term for w in self.withheld for term in w.missing]
        if not missing:  # withheld by the round check, every term found somewhere
            return "unsupported by passages"
        return "unsupported by passages: " + ", ".join(list(dict.fromkeys(missing))[:5])


def grounded_messages(
    question: str, passages: list[Passage], feedback: str = "", assistant: Assistant = DEFAULT_ASSISTANT
) -> list[BaseMessage]:
    """Plain RAG's prompt: numbered passages, the question, the cue in the answer's language."""
    cue = ANSWER_CUE_JA if assistant.answer_language(question) == "ja" else ANSWER_CUE
    messages: list[BaseMessage] = [
        SystemMessage(assistant.system_prompt(GROUNDED_SYSTEM, question)),
        HumanMessage(GROUNDED_USER.format(context=format_context(passages), question=question, cue=cue)),
    ]
    if feedback:
        messages.append(HumanMessage(feedback))
    return messages


async def draft_answer(
    llm: ChatClient,
    question: str,
    passages: list[Passage],
    *,
    node: str,
    grounding: GroundingPolicy,
    feedback: str = "",
    assistant: Assistant = DEFAULT_ASSISTANT,
    live: StreamWriter | None = None,
) -> Draft:
    """One generation over numbered passages, written by the tenant's ``assistant``, through the sentence gate
    (``grounding``: its tests, and the answer's token cap); ``feedback`` asks for a corrected second attempt.
    ``live``: the run's stream writer, when this generation's sentences go to the client as they pass (the model is
    then asked to stream)."""
    messages = grounded_messages(question, passages, feedback, assistant)
    evidence = [p.text for p in passages]
    gate = SentenceGate(question, evidence, len(passages), grounding.min_support, grounding.check(passages))
    reply = await llm.chat(messages, node=node, max_tokens=grounding.max_tokens, on_text=_sending(gate, live))
    if live is None:
        gate.feed(reply.text)
    for piece in gate.close():
        if live is not None:
            live(AnswerText(piece))
    if gate.declined and not gate.text:
        return Draft(abstention_for(question, assistant), [], False, reply.call, gate.withheld, gate.judged)
    text = gate.text
    cited = cited_passages(text, passages) or list(passages)
    return Draft(text, cited, True, reply.call, gate.withheld, gate.judged)


def _sending(gate: SentenceGate, live: StreamWriter | None) -> Callable[[str], None] | None:
    """What the model's text deltas go to while it streams: the gate, whose cleared sentences go to ``live``."""
    if live is None:
        return None

    def on_text(delta: str) -> None:
        for piece in gate.feed(delta):
            live(AnswerText(piece))

    return on_text


async def generate_grounded(
    llm: ChatClient,
    question: str,
    passages: list[Passage],
    policy: GroundingPolicy,
    *,
    node: str,
    assistant: Assistant = DEFAULT_ASSISTANT,
    live: StreamWriter | None = None,
) -> GroundedAnswer:
    """Plain RAG with both LLM-free gates: relevance before the call, support sentence by sentence."""
    usable = relevant(passages, policy)
    if not usable:
        best = max((p.score for p in passages), default=0.0)
        note = f"no passage above relevance {policy.min_relevance:.2f} (best {best:.2f})"
        return GroundedAnswer(abstention_for(question, assistant), [], True, None, note)
    draft = await draft_answer(llm, question, usable, node=node, grounding=policy, assistant=assistant, live=live)
    if not draft.found:
        return GroundedAnswer(draft.text, [], True, draft.call, "model found no answer", usable, draft.withheld)
    if draft.empty:
        abstention = abstention_for(question, assistant)
        return GroundedAnswer(abstention, [], True, draft.call, draft.emptiness(), usable, draft.withheld)
    return GroundedAnswer(draft.text, draft.cited, False, draft.call, context=usable, withheld=draft.withheld)
