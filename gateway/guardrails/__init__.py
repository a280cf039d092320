"""Guardrails in front of every upstream call: personal data masked (or refused), injected instructions flagged.

:mod:`.pii` finds personal data (e-mail, phone, card, My Number, IP, names where a model is configured),
:mod:`.vault` swaps it for typed placeholders and back, :mod:`.injection` spots instructions smuggled into a
prompt or a retrieved passage, and :mod:`.service` applies each tenant's policy to a request.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.guardrails.service import Guardrails, ScreenedRetriever, ScreenedSearch
from gateway.guardrails.vault import Vault

__all__ = ["Guardrails", "ScreenedRetriever", "ScreenedSearch", "Vault"]
