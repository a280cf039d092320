"""Who answers: the tenant's assistant (name, persona, instructions, answer language) in every
answer-writing prompt.

The gateway resolves a tenant's assistant profile per request and hands the pipelines this plain
value (pipelines never import the gateway). Only prompts that write the answer a user reads use it
(the direct answer and the grounded generators); graders, critics and rewriters judge text and
stay impersonal, so a persona cannot bend a groundedness check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Answer languages a profile may fix, by code; "auto" (None here) answers in the question's language.
LANGUAGES: dict[str, str] = {
    "en": "English",
    "ja": "Japanese",
    "zh": "Chinese",
    "ko": "Korean",
    "fr": "French",
    "de": "German",
    "es": "Spanish",
    "pt": "Portuguese",
    "it": "Italian",
    "nl": "Dutch",
    "ru": "Russian",
    "vi": "Vietnamese",
    "th": "Thai",
    "id": "Indonesian",
}

_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")

DEFAULT_NAME = "Gateway Assistant"


@dataclass(frozen=True, slots=True)
class Assistant:
    """One request's assistant. ``language`` is a code of :data:`LANGUAGES`, or None for the question's own;
    ``client_instructions`` is a chat client's system message, present only when the profile allows it."""

    name: str = DEFAULT_NAME
    persona: str = ""
    instructions: str = ""
    language: str | None = None
    client_instructions: str = ""

    def identity(self) -> str:
        """The opening of an answer-writing system prompt: the name, kept verbatim in every language (a small
        model otherwise transliterates it, or falls back to the vendor identity it was trained with)."""
        who = f"You are {self.name}" + (f", {self.persona.rstrip('.')}" if self.persona else "") + "."
        return (
            f"{who} When asked who or what you are, answer that you are {self.name}, writing the name exactly as "
            f'"{self.name}" whatever the language; never claim to be a model made by an AI company.'
        )

    def instruction_block(self) -> str:
        """The operator's instructions, then the client's (which cannot override the operator's or the rules)."""
        parts = []
        if self.instructions:
            parts.append(f"Instructions from the operator:\n{self.instructions}")
        if self.client_instructions:
            parts.append(
                "Instructions from the client application (follow them unless they conflict with anything "
                f"above):\n{self.client_instructions}"
            )
        return "\n\n".join(parts)

    def language_rule(self, question: str) -> str:
        """A named language where one is known: small models follow "Answer in Japanese." far more reliably
        than "answer in the language of the question"."""
        if self.language is not None:
            return f"Always answer in {LANGUAGES.get(self.language, self.language)}, whatever the question's language."
        detected = question_language(question)
        if detected is None:
            return "Answer in the language of the question."
        return f"Answer in {LANGUAGES[detected]}, the language of the question."

    def system_prompt(self, rules: str, question: str) -> str:
        """Identity, then a prompt's own rules, the instructions, and last the answer language (the part that
        varies per question, so the longest shared prefix stays cached by llama.cpp)."""
        return compose(self.identity(), rules, self.instruction_block(), self.language_rule(question))

    def answer_language(self, question: str) -> str | None:
        """The code of the language the answer is due in (None: not known, a Latin-script question)."""
        return self.language or question_language(question)


DEFAULT_ASSISTANT = Assistant()


def question_language(text: str) -> str | None:
    """Japanese or Korean by script (kana marks Japanese even among kanji); None otherwise: kanji alone may be
    Japanese or Chinese, and a Latin-script question's language a character class cannot tell."""
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    return None


def compose(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part)
