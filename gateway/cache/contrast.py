"""The contrast guard: near-identical questions that ask for different things must not share an answer.

Sentence embeddings place "Who joined before Alice?" and "Who joined after Alice?" closer together
(cosine 0.97 with USE) than most real paraphrases: the failure GPTCache's users reported, where a question
and its reversal hit the same entry. Each rule below compares one thing an embedding blurs (numbers
and dates, negation, named entities, comparison direction, who-does-what-to-whom, a single swapped
term) and names the difference, so a rejected candidate can be logged with its reason. Rules are
conservative on purpose: a wrongly rejected paraphrase costs one computation, a wrongly accepted
contrast serves a wrong answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from gateway.cache.contrast_lexicon import (
    APOSTROPHES,
    AUX,
    COPULA,
    DATE_WORDS,
    DIGITS,
    EN_AXES,
    EN_BOUND,
    EN_BOUNDS,
    EN_INFLECTION,
    EN_JOINERS,
    EN_NEGATION,
    EN_NOT_NEGATION,
    EN_NUMERIC_DIRECTION,
    EN_OFFSETS,
    EN_OTHER_PREP,
    EN_PREP_ROLE,
    EN_RELATIVE,
    EN_TOKEN,
    JA_AXES,
    JA_CONTENT,
    JA_DATE,
    JA_DATES,
    JA_HONORIFIC,
    JA_NEGATION,
    JA_NOT_NEGATION,
    JA_PARTICLES,
    JA_RUN,
    JA_SUFFIX_AFTER,
    JA_SUFFIX_ENDING,
    KANJI_DIGITS,
    KANJI_NUMBER,
    KANJI_UNITS,
    MODIFIER,
    MONTHS,
    NOT_ENTITY,
    ONE_POLE_AXES,
    ROMAN,
    THOUSANDS,
    WH,
    WORD_NUMBERS,
    word_set,
)
from pipelines.shared import STOPWORDS, mostly_cjk


@dataclass(frozen=True, slots=True)
class Features:
    """What the rules compare, extracted once per query."""

    text: str  # NFKC, casefolded
    ja: bool
    numbers: frozenset[str]
    dates: frozenset[str]
    negation: str | None  # the first negation cue found, if any
    directions: frozenset[str]  # "axis+" / "axis-"
    entities: tuple[str, ...]  # casefolded proper-noun tokens (EN) / Latin, katakana, suffixed runs (JA)
    katakana: frozenset[str]
    people: frozenset[str]  # JA entities with an honorific: their は/が marks the subject
    roles: tuple[tuple[str, str], ...]  # (term, role) for every term whose role is known
    tokens: tuple[str, ...]  # words (EN) or script runs (JA), for the single-substitution rule


@dataclass(frozen=True, slots=True)
class Contrast:
    """Why two queries must not share an answer."""

    rule: str
    reason: str


def _compact(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _kanji_number(text: str) -> int:
    total, section, digit = 0, 0, 0
    for ch in text:
        if ch in KANJI_DIGITS:
            digit = KANJI_DIGITS[ch]
        elif ch in KANJI_UNITS:
            section += (digit or 1) * KANJI_UNITS[ch]
            digit = 0
        else:  # 万 / 億 close a section
            total += (section + digit or 1) * (10_000 if ch == "万" else 100_000_000)
            section = digit = 0
    return total + section + digit


def _numbers(raw: str, text: str) -> set[str]:
    found: set[str] = set()
    for number, unit in DIGITS.findall(THOUSANDS.sub("", text)):
        value = float(number) * {"万": 10_000, "億": 100_000_000}.get(unit, 1)
        found.add(str(int(value)) if value.is_integer() else number)
    kanji = KANJI_NUMBER.findall(re.sub(r"一番(?!目)", "", text))  # 一番 is "most", not "number one"
    found |= {str(_kanji_number(ordinal or counted)) for ordinal, counted in kanji}
    found |= {WORD_NUMBERS[w] for w in re.findall(r"[a-z]+", text) if w in WORD_NUMBERS}
    found |= {ROMAN[w] for w in re.findall(r"\b[IVX]{2,4}\b", raw) if w in ROMAN}
    for match in re.finditer(r"\b([A-Za-z]+)\b(\s*\d)?", raw):
        word, month = match.group(1), match.group(1).casefold()
        # "may"/"march" are months when capitalised mid-sentence or before a day: not in "May I…?"
        verb_like = month in ("may", "march") and not (word[0].isupper() and (match.start() or match.group(2)))
        if month in MONTHS and not verb_like:
            found.add(MONTHS[month])
    return found


def _dates(text: str) -> set[str]:
    found = {DATE_WORDS[w] for w in re.findall(r"\b[ap]\.m\.|[a-z]+", text) if w in DATE_WORDS}
    found |= {f"{unit}{EN_OFFSETS[when]}" for when, unit in EN_RELATIVE.findall(text)}
    for match in JA_DATE.finditer(text):
        found.add(f"dow{match.group(1)}" if match.group(1) else JA_DATES[match.group(0)])
    return found


def _directions(text: str, ja: bool) -> set[str]:
    if ja:
        return {
            f"{axis}{pole}"
            for axis, (up, down) in JA_AXES.items()
            for pole, rx in (("+", up), ("-", down))
            if re.search(rx, text)
        }
    found = {EN_BOUNDS[phrase] for phrase in EN_BOUND.findall(text)}
    text = EN_BOUND.sub(" ", EN_RELATIVE.sub(" ", text))  # "last year" is a date; "at least" was counted
    words = set(re.findall(r"[a-z]+", text))
    for axis, (up, down) in EN_AXES.items():
        found |= {f"{axis}{pole}" for pole, ws in (("+", up), ("-", down)) if words & word_set(ws)}
    found |= {"amount+" if w == "over" else "amount-" for w in EN_NUMERIC_DIRECTION.findall(text)}
    return found


def _is_entity(token: str) -> bool:
    base = token.removesuffix("'s").rstrip("'")
    folded = base.casefold()
    if base in ROMAN or folded in WORD_NUMBERS or folded in MONTHS or folded in NOT_ENTITY:
        return False
    return any(c.isupper() for c in base)


def _en_entities(raw: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Capitalised tokens and acronyms (not question words or numerals), grouped into spans, with their role."""
    tokens = EN_TOKEN.findall(raw)
    lowered = [t.casefold() for t in tokens]
    entities: list[str] = []
    roles: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        if not _is_entity(tokens[i]):
            i += 1
            continue
        end = i + 1  # "Alice Chen" is one participant; "Alice's Slack" is two
        while end < len(tokens) and not tokens[end - 1].endswith("'") and "'s" not in tokens[end - 1]:
            if not _is_entity(tokens[end]):
                break
            end += 1
        span = [t.removesuffix("'s").rstrip("'").casefold() for t in tokens[i:end]]
        entities.extend(span)
        role = _en_role(lowered, i, end)
        if role:
            roles.append((" ".join(span), role))
        i = end
    return tuple(entities), tuple(roles)


def _en_role(words: list[str], start: int, end: int) -> str | None:
    """The grammatical cue before a name: "to Alice" -> to, "does Alice" -> subj, "manages Alice" -> obj."""
    if words[end - 1].endswith("'s") or words[end - 1].endswith("s'"):
        return "obj"  # "Alice's manager" = "the manager of Alice"
    cue = start - 1
    while cue >= 0 and words[cue] in MODIFIER:  # "depend on the Payments team" -> "on"
        cue -= 1
    prev = words[cue] if cue >= 0 else None
    if prev is None or prev in AUX or prev in WH:
        return "subj"
    if prev in EN_PREP_ROLE or prev in EN_OTHER_PREP:
        return EN_PREP_ROLE.get(prev, prev)
    if prev in COPULA:  # "Is Tokyo bigger…" (yes/no) or "Who is Alice reporting to?"; not "How tall is Everest?"
        return "subj" if cue == 0 or (end < len(words) and words[end].endswith("ing")) else None
    if prev in EN_JOINERS or prev in WORD_NUMBERS or not prev[0].isalpha():
        return None
    return "obj"


def _ja_entities(text: str) -> tuple[tuple[str, ...], frozenset[str], frozenset[str], tuple[tuple[str, str], ...]]:
    """Latin tokens, katakana runs, and kanji runs marked as names by an honorific or an organisation suffix."""
    entities: list[str] = []
    katakana: set[str] = set()
    people: set[str] = set()
    roles: list[tuple[str, str]] = []
    for run in JA_RUN.finditer(text):
        term, rest = run.group(), text[run.end() :]
        latin = term[0].isascii() and term[0].isalpha()
        if honorific := JA_HONORIFIC.match(rest):
            rest = rest[honorific.end() :]
            people.add(term)
        elif (latin or len(term) >= 2) and (suffix := JA_SUFFIX_AFTER.match(rest)):
            rest = rest[suffix.end() :]  # "A社は", "大阪支社を"
        if re.fullmatch(r"[ァ-ヴー]{2,}", term):
            katakana.add(term)
        elif honorific or latin:
            entities.append(term.casefold())
        elif re.fullmatch(r"[一-龥々]+", term) and (end := JA_SUFFIX_ENDING.search(term)) and end.start() >= 2:
            entities.append(term)
        if latin or honorific or re.fullmatch(r"[一-龥々]{2,}|[ァ-ヴー]{2,}", term):
            # A person's の is possessive, as "Alice's" is in English: "中村さんの上司" is Nakamura's boss.
            role = (
                "obj"
                if honorific and rest.startswith("の")
                else next((r for p, r in JA_PARTICLES if rest.startswith(p)), "?")
            )
            if role != "?":
                roles.append((term.casefold(), role))
    return tuple(entities), frozenset(katakana), frozenset(people), tuple(roles)


@lru_cache(maxsize=4096)
def analyse(query: str) -> Features:
    """Extract every feature the rules compare (cached: candidates repeat across lookups)."""
    raw = unicodedata.normalize("NFKC", query).translate(APOSTROPHES)
    text = " ".join(raw.casefold().split())
    ja = mostly_cjk(text)
    neg_text = (JA_NOT_NEGATION if ja else EN_NOT_NEGATION).sub(" ", text)
    negation = (JA_NEGATION if ja else EN_NEGATION).search(neg_text)
    if ja:
        entities, katakana, people, roles = _ja_entities(raw)
        tokens = tuple(m.group().casefold() for m in JA_RUN.finditer(raw) if not m.group().isspace())
    else:
        (entities, roles), katakana, people = _en_entities(raw), frozenset(), frozenset()
        tokens = tuple(re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text))
    return Features(
        text=text,
        ja=ja,
        numbers=frozenset(_numbers(raw, text)),
        dates=frozenset(_dates(text)),
        negation=negation.group() if negation else None,
        directions=frozenset(_directions(text, ja)),
        entities=entities,
        katakana=katakana,
        people=people,
        roles=roles,
        tokens=tokens,
    )


Rule = Callable[[Features, Features], str | None]


def language_differs(a: Features, b: Features) -> str | None:
    return "one query is Japanese, the other is not" if a.ja != b.ja else None


def numbers_differ(a: Features, b: Features) -> str | None:
    if a.numbers == b.numbers:
        return None
    return f"numbers differ: {sorted(a.numbers - b.numbers)} vs {sorted(b.numbers - a.numbers)}"


def dates_differ(a: Features, b: Features) -> str | None:
    return f"dates differ: {sorted(a.dates)} vs {sorted(b.dates)}" if a.dates != b.dates else None


def negation_differs(a: Features, b: Features) -> str | None:
    if (a.negation is None) == (b.negation is None):
        return None
    return f"only one query is negated ({a.negation or b.negation!r})"


def _mentions(features: Features, term: str) -> bool:
    """Whether ``term`` occurs in the query, ignoring case and punctuation ("Wi-Fi" ~ "wifi")."""
    key = _compact(term)
    if not key or key in {_compact(t) for t in features.tokens}:
        return True
    return len(key) >= 4 and key in _compact(features.text)


def entities_differ(a: Features, b: Features) -> str | None:
    """A named thing in one query that the other never mentions (katakana: only when both have one)."""
    for x, y in ((a, b), (b, a)):
        for entity in x.entities:
            if not _mentions(y, entity):
                return f"{entity!r} is named in only one query"
    only_a = [k for k in a.katakana if k not in b.text]
    only_b = [k for k in b.katakana if k not in a.text]
    return f"different names: {only_a[0]!r} vs {only_b[0]!r}" if only_a and only_b else None


def direction_differs(a: Features, b: Features) -> str | None:
    """Opposite poles on one axis; on amount/time/age/order a pole in one query only differs too ("most" vs none)."""
    for axis in sorted({d[:-1] for d in a.directions | b.directions}):
        poles_a = {d for d in a.directions if d[:-1] == axis}
        poles_b = {d for d in b.directions if d[:-1] == axis}
        if poles_a != poles_b and (axis in ONE_POLE_AXES or (poles_a and poles_b)):
            return f"comparison direction differs on {axis}: {sorted(poles_a)} vs {sorted(poles_b)}"
    return None


def roles_differ(a: Features, b: Features) -> str | None:
    """Who does what to whom: a subject in one query is not the subject in the other, or two terms swap roles."""
    roles_a, roles_b = dict(a.roles), dict(b.roles)
    # Japanese は marks a topic as often as a subject: only names and people count there.
    named = set(a.entities) | set(b.entities) | a.people | b.people if a.ja else set(roles_a) | set(roles_b)
    subjects_a = {t for t, r in roles_a.items() if r == "subj" and t in named and _mentions(b, t)}
    subjects_b = {t for t, r in roles_b.items() if r == "subj" and t in named and _mentions(a, t)}
    if subjects_a and subjects_b and not subjects_a & subjects_b:  # "Does Alice work for Bob?" / "…Bob…for Alice?"
        return f"the subject changes: {sorted(subjects_a)} vs {sorted(subjects_b)}"
    shared = [t for t in roles_a if t in roles_b]
    for term in shared:
        ra, rb = roles_a[term], roles_b[term]
        subject_flip = "subj" in (ra, rb) and ra != rb
        if subject_flip and (not a.ja or term in a.people or term in b.people):
            return f"{term!r} is {ra} in one query and {rb} in the other"
    for i, x in enumerate(shared):
        for y in shared[i + 1 :]:
            if roles_a[x] != roles_a[y] and (roles_a[x], roles_a[y]) == (roles_b[y], roles_b[x]):
                return f"{x!r} and {y!r} swap roles"
    return None


def _variant(x: str, y: str) -> bool:
    return x.startswith(y) or y.startswith(x) or EN_INFLECTION.sub("", x) == EN_INFLECTION.sub("", y)


def term_substituted(a: Features, b: Features) -> str | None:
    """The queries are identical but for one short span: exactly where embeddings cannot tell them apart."""
    ta, tb = a.tokens, b.tokens
    head = 0
    while head < min(len(ta), len(tb)) and ta[head] == tb[head]:
        head += 1
    tail = 0
    while tail < min(len(ta), len(tb)) - head and ta[-1 - tail] == tb[-1 - tail]:
        tail += 1
    mid_a, mid_b = ta[head : len(ta) - tail], tb[head : len(tb) - tail]
    if not (1 <= len(mid_a) <= 2 and 1 <= len(mid_b) <= 2):
        return None
    if a.ja:
        if not (any(JA_CONTENT.match(t) for t in mid_a) and any(JA_CONTENT.match(t) for t in mid_b)):
            return None
    elif all(t in STOPWORDS for t in mid_a) or all(t in STOPWORDS for t in mid_b):
        return None
    if len(mid_a) == len(mid_b) == 1 and _variant(mid_a[0], mid_b[0]):
        return None
    return f"one term substituted: {' '.join(mid_a)!r} vs {' '.join(mid_b)!r}"


RULES: tuple[Rule, ...] = (
    language_differs,
    numbers_differ,
    dates_differ,
    negation_differs,
    entities_differ,
    direction_differs,
    roles_differ,
    term_substituted,
)


def find_contrast(query: str, candidate: str, rules: tuple[Rule, ...] = RULES) -> Contrast | None:
    """The first rule that tells the two queries apart, or None when they may share an answer."""
    a, b = analyse(query), analyse(candidate)
    if a.text == b.text:
        return None
    for rule in rules:
        reason = rule(a, b)
        if reason is not None:
            return Contrast(rule.__name__, reason)
    return None
