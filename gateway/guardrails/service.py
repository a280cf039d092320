"""Each tenant's guardrail policy applied to a request: its text on the way in, its passages on the way to the model.

One object per app, built at start-up (the name model, if any, is loaded once). It is handed to the
query service (the user's text: masked or refused before any cache key, model call or web search is
made of it) and wraps the retrievers the pipelines read (passages carrying instructions: flagged,
dropped or refused before a prompt is built from them).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from gateway.errors import PersonalDataBlockedError, PromptInjectionError
from gateway.guardrails.injection import InjectionClassifier, InjectionDetector, train_classifier
from gateway.guardrails.pii import Finding, NameFinder, PiiDetector, SpacyNames
from gateway.guardrails.vault import Vault
from gateway.observability import Telemetry
from gateway.settings import GuardrailSettings
from pipelines.shared import Passage, Retriever, Visibility, WebSearch
from routes.probe import RankingReuser


class Guardrails:
    def __init__(
        self,
        settings: GuardrailSettings,
        telemetry: Telemetry | None = None,
        names: NameFinder | None = None,
        classifier: InjectionClassifier | None = None,
    ) -> None:
        self._settings = settings
        self._telemetry = telemetry or Telemetry(None, None)
        self._pii = PiiDetector(names)
        self._injection = InjectionDetector(classifier)

    @classmethod
    def from_settings(cls, settings: GuardrailSettings, telemetry: Telemetry | None = None) -> Guardrails:
        """What start-up builds: the prompt classifier trained, the name model (if any) loaded."""
        names = SpacyNames(settings.pii_names_model) if settings.pii_names_model else None
        return cls(settings, telemetry, names, train_classifier())

    def screen_prompt(self, tenant: str, texts: Sequence[str], vault: Vault) -> list[str]:
        """The user's texts as they may travel upstream: personal data masked into ``vault`` (or refused),
        instructions aimed at the model flagged (or refused). ``drop`` cannot drop the question itself:
        for a prompt it flags."""
        masked = list(texts)
        policy = self._settings.pii_for(tenant)
        if policy != "off":
            findings, categories = self._personal_data(texts)
            if categories and policy == "block":
                self._telemetry.pii_found(categories, "blocked")
                raise PersonalDataBlockedError(categories)
            if categories:
                masked = [vault.mask(text, found) for text, found in zip(texts, findings, strict=True)]
                self._telemetry.pii_found(categories, "masked")
        started = time.perf_counter()
        kinds = sorted({kind for text in masked for kind in self._injection.check(text, prompt=True).kinds})
        self._telemetry.guard_checked("injection", time.perf_counter() - started)
        if kinds:
            refuse = self._settings.injection_for(tenant) == "refuse"
            self._telemetry.injection_found("prompt", kinds, "refused" if refuse else "flagged")
            if refuse:
                raise PromptInjectionError("prompt", kinds)
        return masked

    def mask_at_rest(self, tenant: str, texts: Sequence[str | None]) -> list[str | None]:
        """Texts a user writes to be kept, never sent upstream (a feedback comment, an expected answer): personal
        data masked under ``mask`` and ``block`` alike (``block`` protects the upstream, which never sees
        them; refusing a rating over a phone number in its comment would lose the rating), kept under ``off``.
        The placeholders are not restored: these texts are read by curators, not returned to their writer."""
        if self._settings.pii_for(tenant) == "off":
            return list(texts)
        vault = Vault()
        findings, categories = self._personal_data(texts)
        if categories:
            self._telemetry.pii_found(categories, "masked")
        return [
            vault.mask(text, found) if text and found else text for text, found in zip(texts, findings, strict=True)
        ]

    def _personal_data(self, texts: Sequence[str | None]) -> tuple[list[list[Finding]], list[str]]:
        """Each text's personal data and the categories found in any of them; the check is timed."""
        started = time.perf_counter()
        findings = [self._pii.find(text) if text else [] for text in texts]
        self._telemetry.guard_checked("pii", time.perf_counter() - started)
        return findings, sorted({finding.category for found in findings for finding in found})

    def screen_passages(self, tenant: str, passages: list[Passage]) -> list[Passage]:
        started = time.perf_counter()
        verdicts = [self._injection.check(f"{p.title}\n{p.text}") for p in passages]
        self._telemetry.guard_checked("injection", time.perf_counter() - started)
        flagged = [verdict for verdict in verdicts if verdict.flagged]
        if not flagged:
            return passages
        kinds = sorted({kind for verdict in flagged for kind in verdict.kinds})
        policy = self._settings.injection_for(tenant)
        action = {"flag": "flagged", "redact": "redacted", "drop": "dropped", "refuse": "refused"}[policy]
        self._telemetry.injection_found("passage", kinds, action, count=len(flagged))
        if policy == "refuse":
            raise PromptInjectionError("passage", kinds)
        if policy == "redact":
            return [
                dataclasses.replace(p, text=self._injection.redact(p.text)) if verdict.flagged else p
                for p, verdict in zip(passages, verdicts, strict=True)
            ]
        if policy == "drop":
            return [p for p, verdict in zip(passages, verdicts, strict=True) if not verdict.flagged]
        return passages


class ScreenedRetriever:
    """The knowledge base as the pipelines see it: every search's passages screened for injected instructions."""

    def __init__(self, inner: Retriever, guard: Guardrails) -> None:
        self._inner = inner
        self._guard = guard

    async def search(
        self, tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        found = await self._inner.search(tenant, query, k, visibility=visibility, vector=vector)
        return self._guard.screen_passages(tenant, found)

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
        """The router probe's ranking serves the first retrieval (one dense search per request), screened like
        any other search; None (search the store) when the inner retriever cannot reuse a ranking."""
        if not isinstance(self._inner, RankingReuser):
            return None
        found = await self._inner.search_reusing(
            tenant, query, k, visibility=visibility, vector=vector, dense=dense, depth=depth
        )
        return None if found is None else self._guard.screen_passages(tenant, found)


class ScreenedSearch:
    """The search-more step's source (the web, or the tenant's store), screened like retrieval."""

    def __init__(self, inner: WebSearch, guard: Guardrails) -> None:
        self._inner = inner
        self._guard = guard
        self.name = inner.name

    async def search(self, tenant: str, query: str, k: int, *, visibility: Visibility) -> list[Passage]:
        return self._guard.screen_passages(tenant, await self._inner.search(tenant, query, k, visibility=visibility))
