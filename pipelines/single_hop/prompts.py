"""The single-hop pipeline answers with the shared grounded-generation prompt."""

from __future__ import annotations

from pipelines.shared import GROUNDED_SYSTEM, GROUNDED_USER

__all__ = ["GROUNDED_SYSTEM", "GROUNDED_USER"]
