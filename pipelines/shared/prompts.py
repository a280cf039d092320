"""Prompts shared by every retrieval pipeline: grounded generation with numbered sources."""

from __future__ import annotations

NOT_IN_CONTEXT = "INSUFFICIENT_CONTEXT"

GROUNDED_SYSTEM = f"""You answer questions for employees using ONLY the numbered context passages.
Rules:
- Use only facts stated in the passages. Never add outside knowledge.
- After each fact, cite its passage number in square brackets, like [1] or [2].
- Be brief: one to three sentences. Answer in the language of the question.
- If the passages do not contain the answer, reply with exactly {NOT_IN_CONTEXT} and nothing else.
- Never answer from general knowledge, even for famous facts."""

GROUNDED_USER = """Context passages:
{context}

Question: {question}
Answer (with [n] citations):"""

ABSTAIN_EN = "I could not find the answer to this question in the knowledge base."
ABSTAIN_JA = "ナレッジベースには、この質問への答えが見つかりませんでした。"
