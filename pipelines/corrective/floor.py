"""Plain RAG's answer as the corrective route's floor.

The corrective route costs several model calls; on questions it never saw it answered worse than plain RAG when
its later rounds went astray (a 1.5B planner naming the wrong bridge, a rewrite drifting off the question) or its
budget ran out. So the route first drafts what plain RAG would answer on the same first retrieval, and a later
answer replaces that draft only when the draft is no answer (the model found none, no sentence passed the support
gate, or the groundedness critic rejected it) or the later answer says something only evidence found after the
first retrieval supports: the reason to search again. A later answer from other passages that adds nothing they
alone hold, a cautious statement, or a run cut short by its budget returns the draft.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.shared import Draft, Passage, has_cjk, lexical_support, normalise, split_sentences, terms


@dataclass(frozen=True, slots=True)
class PlainDraft:
    """Plain RAG's generation on the first retrieval (``context``: its passages, as plain RAG picks them).
    ``rejected``: the groundedness critic found it unsupported when the generator took it again."""

    draft: Draft
    context: list[Passage]
    rejected: bool = False

    @property
    def answered(self) -> bool:
        """Whether it is an answer: the model found one, a sentence of it passed the support gate, no critic
        rejected it."""
        return self.draft.found and bool(self.draft.text) and not self.rejected

    def same_context(self, passages: list[Passage]) -> bool:
        return [p.chunk_id for p in passages] == [p.chunk_id for p in self.context]


def new_support(
    answer: str, question: str, context: list[Passage], floor: list[Passage], min_support: float
) -> tuple[str, ...]:
    """What ``answer`` says on evidence plain RAG did not have: of its sentences the support gate passes against
    ``context``, the terms (or numbers, by value) the passages ``floor`` lack and ``context`` holds. The gate's own
    check (:func:`~pipelines.shared.support.lexical_support`), so it reads Japanese and numbers as the gate does.

    Only where the later passages holding them complete the question (:func:`completes`): a later passage about a
    neighbouring case (another show's premiere date, the next plan's price) supports its own figures, but the
    question's missing part is not in it, so what it supports is not the answer plain RAG lacked."""
    known = {p.chunk_id for p in floor}
    fresh = [p for p in context if p.chunk_id not in known]
    if not fresh:
        return ()
    everything = [p.text for p in context]
    before = [p.text for p in floor]
    found: dict[str, None] = {}
    for sentence in split_sentences(answer):
        whole = lexical_support(sentence.text, question, everything)
        if not whole.supported(min_support):
            continue
        held = set(whole.missing) | set(whole.missing_numbers)
        lacking = lexical_support(sentence.text, question, before)
        new = [t for t in (*lacking.missing_numbers, *lacking.missing) if t not in held]
        # The later passages this sentence's new terms come from: each holds one of them.
        sources = [p for p in fresh if any(_carries(p, term, question) for term in new)]
        if new and completes(question, sources, floor):
            found |= dict.fromkeys(new)
    return tuple(found)


def completes(question: str, later: list[Passage], floor: list[Passage]) -> bool:
    """Whether ``later`` passages hold a part of the question the ``floor`` passages lack: a term of the question
    (the gate's terms; Japanese bigrams found in the text) that only they hold."""
    before, after = _Held(floor), _Held(later)
    return any(after.holds(t) and not before.holds(t) for t in terms(question))


def _carries(passage: Passage, term: str, question: str) -> bool:
    """Whether the passage supports one term of an answer as the gate would (a number by its value)."""
    support = lexical_support(term, question, [passage.text])
    return not support.missing and not support.missing_numbers


class _Held:
    """The terms some passage of a list holds, as the gate finds them."""

    def __init__(self, passages: list[Passage]) -> None:
        text = " ".join(p.text for p in passages)
        self._terms = terms(text)
        self._text = normalise(text)

    def holds(self, term: str) -> bool:
        return term in self._terms or (has_cjk(term) and term in self._text)


def keeps_plain(
    plain: PlainDraft, question: str, answer: str, context: list[Passage], no_answer: bool, min_support: float
) -> bool:
    """Whether the run's last answer gives way to plain RAG's (``no_answer``: it abstains or is a cautious
    statement of what the documents say). An answer drafted on plain RAG's very passages is that draft, or the
    one written when the critic rejected it: it stands."""
    if not plain.answered or answer == plain.draft.text:
        return False
    if no_answer or not answer.strip():
        return True
    if plain.same_context(context):
        return False
    return not new_support(answer, question, context, plain.context, min_support)
