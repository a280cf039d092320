"""Entity links between passages, without a model: what a passage *is about* and what it *mentions*.

The second hop of a bridge question ("the woman who played X in Y": her other career) is a passage about an
entity the question never names, so neither the question's vector nor its words find it; the first hop's passage
names it. A passage is *about* its document's title (the title without its disambiguator, "Kiss and Tell (1945
film)" -> "kiss and tell", and, for a Japanese title, the kanji and katakana words in it), and it *mentions* the
names in its text: runs of capitalised words ("Shirley Temple Black", every shorter run inside it, so "Shirley
Temple" is found too) and the kanji and katakana words of Japanese text (the project's one tokenizer,
:func:`pipelines.shared.text.content_words`: "代表取締役は佐伯遥です" mentions "佐伯遥"). Passage A links to passage B
when A mentions what B is about.

Only the *about* side is stored (``about_keys`` on each chunk, beside its vector, in every store), so a link is
resolved when it is followed: a document added later is linked from every passage that already mentions its title,
and a deleted one is linked from none, without rewriting any other document. The *mention* side is read from the
passages a search returned, when the walk starts from them.
"""

from __future__ import annotations

import functools
import re

from pipelines.shared.text import EN_STOPWORDS, content_words, has_cjk, normalise

# Longest run of words taken as one name ("The Mississippi Institute of Arts and Letters" is seven).
MAX_NAME_WORDS = 7
# A run longer than this is Title Case text (a heading, a list of products), not a name: its words are taken one by one
# and in pairs, so a passage written in Title Case does not yield hundreds of spans.
MAX_RUN_WORDS = 12
# A Japanese word shorter than this is a grammatical piece or a single common kanji, not a name.
MIN_CJK_KEY = 2
# Lower-case words that may sit inside a name ("Institute of Arts and Letters", "Leonardo da Vinci").
_CONNECTORS = frozenset({"of", "the", "and", "de", "da", "di", "del", "du", "von", "van", "der", "la", "le", "y"})
_WORD = re.compile(r"[^\W_]+(?:['’.-][^\W_]+)*")
_DISAMBIGUATOR = re.compile(r"\s*[(（][^)）]*[)）]\s*$")
PASSAGE_KEYS_KEPT = 4096


def _key(text: str) -> str:
    return " ".join(normalise(text).split())


def _is_name_word(word: str) -> bool:
    return word[0].isupper() or word[0].isdigit()


def _name_runs(text: str) -> list[list[str]]:
    """Runs of capitalised words (numbers may continue one: "Apollo 11"), lower-case connectors inside them."""
    runs: list[list[str]] = []
    current: list[str] = []
    pending: list[str] = []  # connectors seen since the last capitalised word
    for match in _WORD.finditer(text):
        word = match.group()
        if has_cjk(word):
            if current:
                runs.append(current)
            current, pending = [], []
        elif word[0].isupper() or (word[0].isdigit() and current):
            current.extend(pending)
            current.append(word)
            pending = []
        elif word.lower() in _CONNECTORS and current and len(pending) < 2:
            pending.append(word)
        else:
            if current:
                runs.append(current)
            current, pending = [], []
    if current:
        runs.append(current)
    return runs


def _spans(run: list[str]) -> set[str]:
    """Every contiguous span of a run that starts and ends on a capitalised word, single stopwords left out."""
    out: set[str] = set()
    longest = MAX_NAME_WORDS if len(run) <= MAX_RUN_WORDS else 2
    for start in range(len(run)):
        if not _is_name_word(run[start]):
            continue
        for end in range(start, min(len(run), start + longest)):
            if not _is_name_word(run[end]):
                continue
            key = _key(" ".join(run[start : end + 1]))
            if start == end and (key in EN_STOPWORDS or key.isdigit()):
                continue
            out.add(key)
    return out


def _cjk_words(text: str) -> set[str]:
    return {w for w in content_words(text) if has_cjk(w) and len(w) >= MIN_CJK_KEY}


@functools.lru_cache(maxsize=PASSAGE_KEYS_KEPT)
def about_keys(title: str) -> frozenset[str]:
    """What a document titled ``title`` is about: the title without a trailing disambiguator, the part before a
    comma ("Edward Stafford, 4th Baron Stafford"), and the Japanese words of a Japanese title."""
    bare = _DISAMBIGUATOR.sub("", title).strip()
    keys = {_key(bare), _key(bare.split(",")[0])} if bare else set()
    if has_cjk(bare):
        keys |= _cjk_words(bare)
    return frozenset(k for k in keys if k and k not in EN_STOPWORDS)


@functools.lru_cache(maxsize=PASSAGE_KEYS_KEPT)
def mention_keys(text: str) -> frozenset[str]:
    """The names ``text`` mentions, as keys :func:`about_keys` may hold."""
    keys: set[str] = set()
    for run in _name_runs(text):
        keys |= _spans(run)
    if has_cjk(text):
        keys |= _cjk_words(text)
    return frozenset(keys)
