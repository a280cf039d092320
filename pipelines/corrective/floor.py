"""Plain RAG's answer as the corrective route's floor.

The corrective route costs several model calls; on questions it never saw it answered worse than plain RAG when
its later rounds went astray (a 1.5B planner naming the wrong bridge, a rewrite drifting off the question) or its
budget ran out. So the route first drafts what plain RAG would answer on the same first retrieval, and a later
answer replaces that draft only when the draft is no answer (the model found none, or no sentence passed the
support gate) or the later answer says something that only evidence found after the first retrieval supports: the
reason to search again. A later answer from the same passages, a cautious statement, or a run cut short by its
budget returns the draft.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.shared.deps import Passage
from pipelines.shared.generation import Draft
from pipelines.shared.support import claim_terms, terms
from pipelines.shared.text import has_cjk, normalise


@dataclass(frozen=True, slots=True)
class PlainDraft:
    """Plain RAG's generation on the first retrieval (``context``: its passages, as plain RAG picks them)."""

    draft: Draft
    context: list[Passage]

    @property
    def answered(self) -> bool:
        """Whether it is an answer: the model found one and a sentence of it passed the support gate."""
        return self.draft.found and bool(self.draft.text)

    def same_context(self, passages: list[Passage]) -> bool:
        return [p.chunk_id for p in passages] == [p.chunk_id for p in self.context]


def new_support(answer: str, question: str, context: list[Passage], floor: list[Passage]) -> tuple[str, ...]:
    """The terms ``answer`` adds beyond the question that its ``context`` holds only in passages ``floor`` lacks:
    what the answer says on evidence plain RAG did not have. Terms are the support gate's (kanji and katakana
    bigrams found anywhere in a Japanese passage's text, as the gate finds them)."""
    known = {p.chunk_id for p in floor}
    fresh = [p for p in context if p.chunk_id not in known]
    if not fresh:
        return ()
    novel = claim_terms(answer) - terms(question)
    old = _Holder(floor)
    new = _Holder(fresh)
    return tuple(sorted(t for t in novel if new.holds(t) and not old.holds(t)))


class _Holder:
    """Whether some passage of a list holds a term, as the support gate finds terms."""

    def __init__(self, passages: list[Passage]) -> None:
        text = " ".join(p.text for p in passages)
        self._terms = terms(text)
        self._text = normalise(text)

    def holds(self, term: str) -> bool:
        return term in self._terms or (has_cjk(term) and term in self._text)


def keeps_plain(plain: PlainDraft, question: str, answer: str, context: list[Passage], no_answer: bool) -> bool:
    """Whether the run's last answer gives way to plain RAG's (``no_answer``: it abstains or is a cautious
    statement of what the documents say)."""
    if not plain.answered or answer == plain.draft.text:
        return False
    if no_answer or not answer.strip():
        return True
    return not new_support(answer, question, context, plain.context)
