"""What the tenant's knowledge base says about a question: a top-k probe and the signals read from it.

A router that reads only the question learns each training set's *style* (long noun phrases look
multi-hop, short questions look single-hop) and fails on sets it never saw. How many pieces of
evidence a question needs is a property of the question *and* the knowledge base, so the router
looks at the passages one search returns, with the query vector the request already computed:

- ``top_score`` / ``margin``: is anything in the store about this at all, and does one passage stand
  out from the rest (a single answering passage) or do several score alike;
- ``best_coverage`` vs ``union_coverage``: the share of the question's content words (one tokenizer,
  :mod:`pipelines.shared.text`: :func:`~pipelines.shared.text.content_words`, so a Japanese word is a
  kanji or katakana run, matched inside the passage's text, not a space-separated token) that the best
  single *document* holds versus all the top documents together. A single-hop question is covered by
  one document; a bridge or comparison question's parts live in different documents, so the union
  covers much more than any one of them. Words that only say what kind of answer is wanted ("what
  year", "how many", 何年, 誰) are not parts of the question: no document is expected to hold them;
- a *document* is a source: the passages of one title (an article cut into paragraphs or chunks, a
  manual page in sections) count as one, the document id only where a passage has no title. Counted
  by document id, the paragraphs of one article "held different parts" of every question about it,
  and leave-one-dataset-out sent 30% of SQuAD's single-hop questions to the multi-hop route;
- ``second_document_share``: the share of the question's terms the best document lacks and another
  single document holds: the second part of a bridge or comparison question;
- ``entity_coverage``: the same for name-like terms (capitalised words, katakana runs, numbers),
  which carry the parts of a comparison ("older, A or B?");
- ``covering_documents``: how many documents a greedy cover of the question's terms needs, each adding
  a part of the question the ones before it did not hold;
- ``shared_figures`` / ``distinct_second_share``: whether the document holding that second part *repeats* the best
  one. Knowledge bases tell one fact many times (outlets on one event, a policy and its FAQ, manual editions),
  each in its own words, so a paraphrase leaves words of the question to a sibling and the lexical signals above
  read a "second part" where there is only a second telling. Two tellings of one fact state the same figures
  (dates, amounts, counts, durations) beyond those the question gives; a document holding a *different* part of a
  question rarely repeats the first one's figures, and when it does it is one (the year a company was founded,
  in the company's page and its founder's). Shared names do not tell the two apart: a bridge's second document
  names the bridge entity the first one mentions. ``distinct_second_share`` is the second part's share, or none
  where the two documents share ``REPEATED_FIGURES`` figures the question does not give.
- ``titled_documents``: how many of the top documents the question asks about together by their titles ("which is
  longer, the Pendrell Line or the Esker Line?"). Pages cross-reference each other (a river's page names its
  tributary, a depot's the trains it keeps), so one of a comparison's two pages can hold every word of the question;
  a question joining two documents' titles still asks about two. A Latin title counts where the question writes it
  as a name (capitalised, or as the title writes it: "iOS"): pages titled with common words ("Billing", "Accounts")
  are words of a request in lower case.

The passages travel with the signals (:class:`Probe`) so retrieval can reuse them instead of
searching the store a second time. The probe may search deeper than the signals read (``depth`` vs
``PROBE_DEPTH``): hybrid retrieval fuses a dense ranking three times deeper than it returns, and a
probe that deep lets it take that ranking from the probe and search only the keyword index.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
from collections.abc import Iterable, Sequence, Set
from dataclasses import astuple, dataclass, fields
from typing import Protocol, runtime_checkable

import Stemmer

from pipelines.shared import (
    EN_STOPWORDS,
    Passage,
    Retriever,
    Visibility,
    content_terms,
    content_words,
    has_cjk,
    normalise,
    tokens,
)

# How many of the probe's passages the signals read (what the router was trained on). The probe itself
# may search deeper (``FrontRouter.depth``) so retrieval can reuse its ranking.
PROBE_DEPTH = 12
# Passages whose words are kept between requests (a tenant's hot chunks; each entry a few KB).
PASSAGE_VIEWS = 2048
# Questions whose terms are kept: enough to carry them from the request path's early reading (while the query
# vector is computed, FrontRouter.read_question) to its decision, for every request in flight.
QUESTIONS_KEPT = 1024
# A document joins the cover only if it adds at least this share of the question's terms: one stray
# common word is not a "part" of the question.
MIN_PART_SHARE = 0.1

# Capitalised Latin words, katakana runs (names and loanwords in Japanese), numbers.
_NAME_LIKE = re.compile(r"\b[A-Z][^\W_]+|[\u30a0-\u30ff]{2,}|\d+")
# Figures: numbers of the normalised text (full-width digits are ASCII there, "1,800" is "1800"; "2.1" and "10:30" are
# one figure each) and English month names, so "14 March" is two figures as Japanese "3月14日" is ("May" is left out:
# it is more often a verb).
_FIGURE = re.compile(
    r"\d+(?:[.:]\d+)*|\b(?:january|february|march|april|june|july|august|september|october|november|december)\b"
)
# Shared figures at which the document holding the question's second part counts as a retelling of the best one.
# One is no evidence: leave-one-dataset-out's probes found single shared years and small counts between the two
# documents of HotpotQA and written-KB bridge questions. Of the questions whose two documents share any figure, two
# or more are shared in 5 of 30 English and 1 of 10 Japanese multi-hop ones, in 44 of 48 Japanese and 22 of 39
# English redundant ones.
REPEATED_FIGURES = 2
# Words that name the kind of answer asked for ("in what year", "how many", "what is it called"): the
# answer's document holds the answer, not these words, and a distractor that happens to hold "year" is
# not the second part of the question.
_ANSWER_KIND = frozenset(
    {
        "year",
        "years",
        "month",
        "date",
        "day",
        "many",
        "much",
        "number",
        "name",
        "named",
        "called",
        "kind",
        "type",
        "long",
        "old",
    }
)
# Japanese interrogatives open a kanji word (何年, 何人, 何日目, 誰): the rest (年, 人, 日目) stays a part.
_INTERROGATIVE = "何誰幾"


@dataclass(frozen=True, slots=True)
class ProbeSignals:
    """Numbers only: safe to return to the caller and to put on a span."""

    passages: int
    documents: int
    top_score: float
    margin: float
    second_document_score: float
    best_coverage: float
    union_coverage: float
    coverage_gain: float
    second_document_share: float
    entity_coverage: float
    entity_union_coverage: float
    covering_documents: int
    question_terms: int
    shared_figures: int
    distinct_second_share: float
    titled_documents: int = 0

    def vector(self) -> list[float]:
        return [float(v) for v in astuple(self)]

    def as_dict(self) -> dict[str, float | int]:
        return {name: getattr(self, name) for name in SIGNAL_NAMES}


SIGNAL_NAMES: tuple[str, ...] = tuple(f.name for f in fields(ProbeSignals))
EMPTY_SIGNALS = ProbeSignals(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0.0)


@dataclass(frozen=True, slots=True)
class Probe:
    """One search of the tenant's store, kept whole so single_hop / multi_hop retrieval can reuse it.
    ``query`` is what was searched for: never exported (not in the API response, not on spans).
    ``passages`` is the dense ranking searched ``depth`` deep; the signals read its first ``PROBE_DEPTH``."""

    tenant: str
    query: str
    depth: int
    passages: tuple[Passage, ...]
    signals: ProbeSignals
    covering: tuple[str, ...]  # doc ids of the greedy cover, in the order they joined it
    # Whose search it was: retrieval reuses it for that reader only (None, offline probes: never reused).
    visibility: Visibility | None = None

    @property
    def empty(self) -> bool:
        return not self.passages

    @property
    def evidence(self) -> tuple[Passage, ...]:
        """The passages the signals were read from (what the API and the route span show)."""
        return self.passages[:PROBE_DEPTH]

    def top(self, k: int) -> list[Passage] | None:
        """The first ``k`` passages, or None when the probe was shallower than ``k`` (search again)."""
        if k > self.depth:
            return None
        return list(self.passages[:k])


# One Snowball stemmer per thread: its C state must not be used by two threads at once, and the router is trained in a
# worker thread while the event loop may classify.
_STEMMERS = threading.local()


def stemmer_version() -> str:
    """The stemmer's release: the signals, and so a router trained on them, depend on how it stems."""
    return f"pystemmer{Stemmer.version()}"


def _stem(term: str) -> str:
    """English inflection off with Snowball's stemmer ("opened" ~ "open", "services" ~ "service", "included" ~
    "include"): questions and passages word the same fact differently. An ad hoc suffix list stripped "-es" and "-ed"
    only from words that had them, so "services" and "service", "included" and "include", "times" and "time" stayed
    apart, and a paraphrasing document "missed" a question word it held (the best document then looked as if it
    lacked a part of the question). CJK words are kept as they are."""
    if has_cjk(term):
        return term
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = Stemmer.Stemmer("english")
    return str(stemmer.stemWord(term))


def _terms(text: str) -> set[str]:
    return {_stem(t) for t in content_terms(text)}


def question_words(question: str) -> set[str]:
    """The parts of a question a document may hold: its content words, stemmed, less the answer-kind words."""
    words: set[str] = set()
    for word in content_words(question):
        if has_cjk(word):
            word = word.lstrip(_INTERROGATIVE)
        elif word in _ANSWER_KIND:
            continue
        if word:
            words.add(_stem(word))
    return words


def _source(passage: Passage) -> str:
    """Which document a passage belongs to, for the signals: its title, else its document id."""
    return _title_source(passage.title) or passage.doc_id


@functools.lru_cache(maxsize=PASSAGE_VIEWS)
def _title_source(title: str) -> str:
    """A title as the signals compare documents: normalised (a regular expression pass, ~2 us), once per title
    rather than for each of the dozen passages every probe reads."""
    return normalise(title).strip()


# A title's trailing qualifier is not how a question names the document: "Frozen (2013 film)" is asked as "Frozen".
_TITLE_QUALIFIER = re.compile(r"\s*[(（【\[][^)）】\]]*[)）】\]]\s*$")
# Quotation marks around a title (「白露」) are not part of the name, nor of what joins two names.
_QUOTES = "「」『』\"“”'‘’"
# Shorter Latin titles ("IT", "Go") are words of any question; a two-character Japanese title is a name (白露).
MIN_LATIN_TITLE = 3
# Two names a question asks about together are joined by a coordinating word or mark close by: "X or Y", "X, Y",
# "X vs Y", "X older than Y", "the town of X or the University of Y", 「X」と「Y」, Xの開館とYの…. Two titles the
# question uses otherwise ("an overview of pricing", "the API from the CLI", 料金プランの概要) are words of one
# request, not two documents asked about.
_JOINING = re.compile(r"(?<![a-z])(?:and|or|nor|vs|versus|than)(?![a-z])|[,、/&]|と|や|または|および|及び")
MAX_JOIN_GAP = 32  # characters between the two names
_LATIN_WORD = re.compile(r"[0-9a-z\u00c0-\u024f]")
_ARTICLE = "the "


@functools.lru_cache(maxsize=PASSAGE_VIEWS)
def _title_name(title: str) -> str | None:
    """How a question names a document by its title: normalised (case kept), without its qualifier or quotes. None for
    a title no question names so (empty, or a Latin one too short to be more than a word)."""
    name = normalise(title, fold_case=False).strip().strip(_QUOTES)
    name = _TITLE_QUALIFIER.sub("", name).strip().strip(_QUOTES).strip()
    if len(name) < (2 if has_cjk(name) else MIN_LATIN_TITLE):
        return None
    return name


def _occurrences(name: str, text: str) -> list[tuple[int, int]]:
    """Where ``name`` stands in ``text``: anywhere for a Japanese name, as whole words for a Latin one (bounded by
    anything but a Latin letter or digit, so "Beacon" is found in "Beaconと" and not in "Beacons")."""
    found, start = [], text.find(name)
    while start >= 0:
        end = start + len(name)
        if has_cjk(name) or not (
            (start and _LATIN_WORD.match(text[start - 1])) or (end < len(text) and _LATIN_WORD.match(text[end]))
        ):
            found.append((start, end))
        start = text.find(name, start + 1)
    return found


def _written_as_name(written: str, titles: Set[str]) -> bool:
    """Whether the question writes a Latin title as a name: as the title itself is written ("iOS", "eBay"), or
    capitalised (or opening with a digit) past a leading article ("the Dandy Warhols" names "The Dandy Warhols").
    Pages titled with common words (Pricing, Overview, Accounts) are asked about in lower case when they are words of
    the request ("pricing and accounts settings"), and by their names when they are the pages compared. A Japanese
    title has no case."""
    if written in titles or has_cjk(written):
        return True
    if written.casefold().startswith(_ARTICLE) and len(written) > len(_ARTICLE):
        written = written[len(_ARTICLE) :]
    return not written[0].islower()


def titled_documents(question: str, titles: Iterable[str]) -> int:
    """How many documents the question names by title and asks about together ("which is longer, the Pendrell Line
    or the Esker Line?", 「白露」と「雪待」). A comparison's pages often mention each other, so that one of them holds
    every word of the question and the coverage signals read one document. Counted by name: "Frozen (2013 film)"
    and "Frozen" are one, a name standing inside a longer one the question uses ("Pendrell" in "Pendrell Line")
    is not another, and a Latin title counts where the question writes it as a name (:func:`_written_as_name`)."""
    cased = normalise(question, fold_case=False)
    # Folded a character at a time, so each folded position knows the character it came from ("ß" folds to "ss").
    pieces = [char.casefold() for char in cased]
    asked = "".join(pieces)
    source = [index for index, piece in enumerate(pieces) for _ in piece]
    names: dict[str, set[str]] = {}  # folded name -> the titles' own spellings of it
    for name in map(_title_name, set(titles)):
        if name:
            names.setdefault(name.casefold(), set()).add(name)
    spots = [
        (start, end, name)
        for name, spellings in names.items()
        for start, end in _occurrences(name, asked)
        if _written_as_name(cased[source[start] : source[end - 1] + 1], spellings)
    ]
    spots = [s for s in spots if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spots)]
    spots.sort()
    joined: set[str] = set()
    for (_, end, first), (start, _, second) in itertools.pairwise(spots):
        gap = asked[end:start]
        if first != second and len(gap) <= MAX_JOIN_GAP and _JOINING.search(gap):
            joined.update((first, second))
    return len(joined)


def _name_terms(text: str) -> set[str]:
    found = {normalise(m.group()) for m in _NAME_LIKE.finditer(text)}
    return {name for name in found if name not in EN_STOPWORDS}


@dataclass(frozen=True, slots=True)
class _PassageView:
    body: str  # normalised title and text
    words: frozenset[str]
    terms: frozenset[str]  # stemmed content terms
    figures: frozenset[str]


@functools.lru_cache(maxsize=PASSAGE_VIEWS)
def _passage_view(title: str, text: str) -> _PassageView:
    """A passage's normalised text (title and body), its words, its (stemmed) content terms and its figures: a pure
    function of the passage, kept for the passages probes keep finding. Reading them again for every request was ~14 %
    of an ``auto`` miss's CPU (normalising and tokenizing 8 chunks of ~700 characters), for the same answer each time.
    Keyed by the two strings as they are, not joined: a passage's strings are the same objects from one probe to
    the next, whose hashes Python keeps, where a joined copy was rebuilt and hashed anew for each of them."""
    body = f"{title}\n{text}"
    normalised = normalise(body)
    figures = frozenset(_FIGURE.findall(normalised))
    return _PassageView(normalised, frozenset(tokens(body)), frozenset(_terms(body)), figures)


@dataclass(frozen=True, slots=True)
class QuestionTerms:
    """What the signals read of the question alone: its words a passage may hold, the names in it, each split by
    how a passage is searched for them."""

    wanted: frozenset[str]
    names: frozenset[str]
    wanted_parts: _Wanted
    name_parts: _Wanted
    figures: frozenset[str]


@functools.lru_cache(maxsize=QUESTIONS_KEPT)
def question_terms(question: str) -> QuestionTerms:
    """A pure function of the question, kept: the request path reads it while the query vector is still being
    computed (``FrontRouter.read_question``), and the probe's signals then find it here."""
    wanted, names = frozenset(question_words(question)), frozenset(_name_terms(question))
    figures = frozenset(_FIGURE.findall(normalise(question)))
    return QuestionTerms(wanted, names, _Wanted.of(wanted), _Wanted.of(names), figures)


@dataclass(frozen=True, slots=True)
class _Wanted:
    """Question words split once by how a passage is searched for them: a CJK word inside the normalised text
    (Japanese has no spaces to cut the passage at; "タスクノート" is found in "タスクノートモバイル"), any other
    word whole among the passage's own (a stem among its terms, a name among its words: "art" is not in
    "start")."""

    cjk: frozenset[str]
    latin: frozenset[str]

    @classmethod
    def of(cls, words: Set[str]) -> _Wanted:
        cjk = frozenset(w for w in words if has_cjk(w))
        return cls(cjk, frozenset(words) - cjk)

    def held(self, body: str, body_latin: Set[str]) -> set[str]:
        return {w for w in self.cjk if w in body} | (self.latin & body_latin)


def _share(covered: Set[str], wanted: Set[str]) -> float:
    return len(covered & wanted) / len(wanted) if wanted else 0.0


def _greedy_cover(wanted: Set[str], documents: dict[str, set[str]]) -> list[str]:
    remaining = set(wanted)
    chosen: list[str] = []
    minimum = max(1, round(MIN_PART_SHARE * len(wanted)))
    while remaining:
        doc_id, terms = max(documents.items(), key=lambda item: len(item[1] & remaining), default=("", set()))
        if len(terms & remaining) < minimum or doc_id in chosen:
            break
        chosen.append(doc_id)
        remaining -= terms
    return chosen


def read_signals(question: str, passages: Sequence[Passage]) -> tuple[ProbeSignals, tuple[str, ...]]:
    """Signals of one question against the passages a search returned (best first)."""
    if not passages:
        return EMPTY_SIGNALS, ()
    asked = question_terms(question)
    wanted, names, wanted_parts, name_parts = asked.wanted, asked.names, asked.wanted_parts, asked.name_parts
    doc_terms: dict[str, set[str]] = {}
    doc_names: dict[str, set[str]] = {}
    doc_score: dict[str, float] = {}
    doc_figures: dict[str, set[str]] = {}
    doc_id: dict[str, str] = {}  # a source's best passage's document id, for the cover
    for passage in passages:
        source = _source(passage)
        view = _passage_view(passage.title, passage.text)
        doc_terms.setdefault(source, set()).update(wanted_parts.held(view.body, view.terms))
        doc_names.setdefault(source, set()).update(name_parts.held(view.body, view.words))
        doc_figures.setdefault(source, set()).update(view.figures)
        doc_score[source] = max(doc_score.get(source, -1.0), passage.score)
        doc_id.setdefault(source, passage.doc_id)
    scores = [p.score for p in passages]
    rest = scores[1:]
    union_terms = set().union(*doc_terms.values())
    union_names = set().union(*doc_names.values())
    ranked_docs = sorted(doc_score.values(), reverse=True)
    best = max((_share(t, wanted) for t in doc_terms.values()), default=0.0)
    union = _share(union_terms, wanted)
    cover = _greedy_cover(wanted, doc_terms)
    best_doc = max(doc_terms, key=lambda d: len(doc_terms[d] & wanted))
    missing = wanted - doc_terms[best_doc]
    # The document holding most of what the best one lacks (ties: the one holding more of the question).
    supplier = max(
        (d for d in doc_terms if d != best_doc),
        key=lambda d: (len(doc_terms[d] & missing), len(doc_terms[d] & wanted)),
        default=None,
    )
    second = len(doc_terms[supplier] & missing) if supplier is not None else 0
    shared = len((doc_figures[best_doc] & doc_figures[supplier]) - asked.figures) if supplier is not None else 0
    second_share = second / len(wanted) if wanted else 0.0
    signals = ProbeSignals(
        passages=len(passages),
        documents=len(doc_terms),
        top_score=scores[0],
        margin=scores[0] - (sum(rest) / len(rest) if rest else 0.0),
        second_document_score=ranked_docs[1] if len(ranked_docs) > 1 else 0.0,
        best_coverage=best,
        union_coverage=union,
        coverage_gain=union - best,
        second_document_share=second_share,
        entity_coverage=max((_share(n, names) for n in doc_names.values()), default=0.0),
        entity_union_coverage=_share(union_names, names),
        covering_documents=len(cover),
        question_terms=len(wanted),
        shared_figures=shared,
        distinct_second_share=0.0 if shared >= REPEATED_FIGURES else second_share,
        titled_documents=titled_documents(question, (p.title for p in passages)),
    )
    return signals, tuple(doc_id[source] for source in cover)


def probe_of(
    tenant: str, question: str, passages: Sequence[Passage], depth: int, visibility: Visibility | None = None
) -> Probe:
    """``passages``: a dense ranking searched ``depth`` deep (for ``visibility``'s reader); the signals read its
    first ``PROBE_DEPTH``."""
    signals, cover = read_signals(question, passages[:PROBE_DEPTH])
    return Probe(
        tenant=tenant,
        query=question,
        depth=depth,
        passages=tuple(passages),
        signals=signals,
        covering=cover,
        visibility=visibility,
    )


@runtime_checkable
class RankingReuser(Protocol):
    """A retriever that can compute its search from a dense ranking already made for the same query
    (``gateway.knowledge.KnowledgeBase``: dense retrieval takes its head, hybrid fuses it with keyword hits)."""

    async def search_reusing(
        self,
        tenant: str,
        query: str,
        k: int,
        *,
        visibility: Visibility,
        vector: list[float] | None,
        dense: Sequence[Passage],
        depth: int,
    ) -> list[Passage] | None:
        """None when ``dense`` (searched ``depth`` deep, for ``visibility``) is too shallow for ``k``."""
        ...


class ProbeFirstRetriever:
    """A ``Retriever`` for one request: the search the router's probe already made (same tenant, same
    query) is computed from its dense ranking; every other search (a rewritten query, a search deeper
    than the probe) goes to the store. Only a :class:`RankingReuser` is served from the probe (it knows
    how its search is made from a dense ranking: hybrid retrieval adds only the keyword search); any
    other retriever, including a wrapper around one (it may rank or filter differently), searches as it
    always did. Handing this to single_hop / multi_hop makes a request search the vectors once for
    routing and first retrieval together."""

    def __init__(self, retriever: Retriever, probe: Probe | None) -> None:
        self._retriever = retriever
        self._probe = probe
        self.served = 0  # searches answered from the probe, for tests and telemetry

    async def search(
        self, tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        probe = self._probe
        # The probe's ranking is one reader's: another visibility (or an unknown one) searches afresh.
        if probe is not None and probe.tenant == tenant and probe.query == query and probe.visibility == visibility:
            retriever = self._retriever
            found = None
            if isinstance(retriever, RankingReuser):
                found = await retriever.search_reusing(
                    tenant, query, k, visibility=visibility, vector=vector, dense=probe.passages, depth=probe.depth
                )
            if found is not None:
                self.served += 1
                return found
        return await self._retriever.search(tenant, query, k, visibility=visibility, vector=vector)
