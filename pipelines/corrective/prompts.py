"""Prompts of the corrective pipeline (grader, rewriter, critics)."""

from __future__ import annotations

GRADE_SYSTEM = """You judge whether a document helps answer a question.
"relevant" is true if the document states a fact needed for the answer (even partly, e.g. one step
of a two-step question); false if it is only on a similar topic. Give a confidence from 0 to 1."""

GRADE_USER = """Question: {question}

Document ({title}):
{text}"""

REWRITE_SYSTEM = """You write one search query for a document search engine.
Given a question and what has been found so far, write a short query for the information that is
still missing (for a two-step question: the second step, naming the entity found in the first).
Reply with the query only, no explanation."""

REWRITE_USER = """Question: {question}
Found so far:
{found}
Missing: {missing}
Search query:"""

GROUNDED_SYSTEM = """You check an answer against evidence. List every claim of the answer that the
evidence does not state. A claim is supported only if the evidence says it (paraphrase is fine)."""

GROUNDED_USER = """Evidence:
{evidence}

Answer: {answer}"""

USEFUL_SYSTEM = """You check whether an answer addresses the question asked. "useful" is true if it
gives the information asked for; false if it answers something else, is vague, or says the
information is missing. If not useful, say briefly what is missing."""

USEFUL_USER = """Question: {question}
Answer: {answer}"""

REGENERATE_NOTE = """Your previous answer made claims the passages do not state: {claims}.
Answer again using only what the passages state."""

CAUTIOUS_EN = "I could not confirm a complete answer from the knowledge base. What the documents do say: {said}"
CAUTIOUS_JA = "ナレッジベースから完全な回答を確認できませんでした。文書に書かれていること: {said}"
CAUTIOUS_MISSING_EN = " They do not state: {missing}."
CAUTIOUS_MISSING_JA = " 文書に記載がないこと: {missing}。"
