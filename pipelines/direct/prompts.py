"""Prompt for answering without the knowledge base: the assistant's identity (``pipelines.shared.persona``),
these rules, the operator's and client's instructions, then the answer language."""

from __future__ import annotations

RULES = """Answer directly and concisely. If a question needs internal company documents you do not have,
say that you cannot check them from here."""
