"""Typed placeholders for one request's personal data, and the way back.

The upstream model sees ``<EMAIL_1>``; the user sees the address again. A vault lives for one request
(a chat's turns share it, so one address is one placeholder in every turn) and is never stored: caches
and answer records hold the masked text, which is why an answer cached for ``<EMAIL_1>`` serves the
next request with the same masked question, restored with that request's own values.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from gateway.guardrails.pii import Category, Finding

_LONGEST_FORM = 24  # "<CREDIT_CARD_999>" and then some: a streamed tail longer than this holds no placeholder


class Vault:
    def __init__(self) -> None:
        self._by_value: dict[str, str] = {}
        self._by_key: dict[str, str] = {}
        self._counts: Counter[str] = Counter()
        self._pattern: re.Pattern[str] | None = None

    def __bool__(self) -> bool:
        return bool(self._by_key)

    @property
    def categories(self) -> list[Category]:
        """Categories masked so far (for metrics and spans: names only, never values)."""
        return sorted({key.rsplit("_", 1)[0] for key in self._by_key})  # type: ignore[misc]

    def mask(self, text: str, findings: Sequence[Finding]) -> str:
        parts: list[str] = []
        last = 0
        for finding in findings:
            parts.append(text[last : finding.start])
            parts.append(f"<{self._key(finding.category, text[finding.start : finding.end])}>")
            last = finding.end
        parts.append(text[last:])
        return "".join(parts)

    def _key(self, category: Category, value: str) -> str:
        key = self._by_value.get(value)
        if key is None:
            self._counts[category] += 1
            key = f"{category}_{self._counts[category]}"
            self._by_value[value] = key
            self._by_key[key] = value
            self._pattern = None
        return key

    def restore(self, text: str) -> str:
        """Each placeholder, with or without its brackets (small models drop them), back to its value."""
        pattern = self._compiled()
        if pattern is None:
            return text
        return pattern.sub(lambda m: self._by_key[m.group(1)], text)

    def _compiled(self) -> re.Pattern[str] | None:
        if not self._by_key:
            return None
        if self._pattern is None:
            keys = "|".join(sorted(map(re.escape, self._by_key), key=len, reverse=True))
            self._pattern = re.compile(rf"<?\b({keys})\b>?")
        return self._pattern

    def streaming(self) -> StreamRestorer:
        return StreamRestorer(self)

    def _forms(self) -> list[str]:
        return [form for key in self._by_key for form in (f"<{key}>", f"{key}>")]


class StreamRestorer:
    """Restores placeholders in text that arrives in pieces: a tail that may be the start of one is held
    back until the next piece (or the end) decides, so the pieces add up to ``vault.restore(whole)``."""

    def __init__(self, vault: Vault) -> None:
        self._vault = vault
        self._held = ""
        self._before = ""  # the last character released: a placeholder glued to a word is not one

    def feed(self, delta: str) -> str:
        text = self._held + delta
        forms = self._vault._forms()
        cut = len(text)
        for start in range(max(0, len(text) - _LONGEST_FORM), len(text)):
            tail = text[start:]
            previous = text[start - 1] if start else self._before
            glued = not tail.startswith("<") and (previous.isalnum() or previous == "_")
            if not glued and any(form.startswith(tail) for form in forms):
                cut = start
                break
        self._held = text[cut:]
        if cut:
            self._before = text[cut - 1]
        return self._vault.restore(text[:cut])

    def flush(self) -> str:
        text, self._held = self._held, ""
        return self._vault.restore(text)
