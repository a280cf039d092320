"""Prompts of the corrective pipeline (grader, rewriter, critics)."""

from __future__ import annotations

from pipelines.shared import LANGUAGES, QUOTED_DATA_RULE, question_language

GRADE_SYSTEM = (
    """You check whether a document helps answer a question.
First copy into "fact" the one sentence or phrase of the document that is most useful for the
question (for a two-step question, useful for either step), or "none" if nothing is.
Then set "relevant": true only if that fact helps answer the question; false if the document is
merely on a similar topic.
"""
    + QUOTED_DATA_RULE
)

GRADE_USER = """Question: {question}

Document ({title}):
{text}"""

REWRITE_SYSTEM = """You write one search question for a document search engine.
Given a question and what has been found so far, ask for the information that is still missing.
For a two-step question, ask the second step directly, naming the entity the first step found.
Write it in the language of the question. Reply with the search question only."""

REWRITE_EXAMPLES: list[tuple[str, str]] = [
    (
        "Question: Which city was the director of the film Inception born in?\n"
        "Found so far:\n- (Inception) Inception is a 2010 film directed by Christopher Nolan.\n"
        "Missing: the director's birthplace",
        "Where was Christopher Nolan born?",
    ),
    (
        "Question: How many employees work at the branch that opened most recently?\n"
        "Found so far:\n- (History) The Nagoya branch opened in 2023, after Sapporo (2019).\n"
        "Missing: unknown",
        "How many employees work at the Nagoya branch?",
    ),
    (
        "Question: 創業者が卒業した大学はどこですか\nFound so far:\n- nothing yet\nMissing: unknown",
        "会社の創業者は誰ですか",
    ),
]

REWRITE_USER = """Question: {question}
Found so far:
{found}
Missing: {missing}
Already searched (write a different query): {tried}
Search query:"""

GROUNDED_SYSTEM = (
    """You check an answer against evidence. List every claim of the answer that the
evidence does not state. A claim is supported only if the evidence says it (paraphrase is fine).
"""
    + QUOTED_DATA_RULE
)

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

EMPTY_ANSWER_NOTE = """Your previous answer gave only citation numbers and stated nothing.
Answer the question in one or two full sentences, citing the passages like [1]."""

# The notes in Japanese for a Japanese answer: told in English to answer again, the small model answers again in
# English, and an English answer over Japanese passages can only be checked by the critic, which rejects it.
REGENERATE_NOTE_JA = """前の回答には、資料に書かれていない内容が含まれていました: {claims}。
資料に書かれていることだけを使って、日本語で答え直してください。"""

EMPTY_ANSWER_NOTE_JA = """前の回答は出典番号だけで、何も述べていませんでした。
質問に日本語の1〜2文で答え、[1] のように出典番号を付けてください。"""

# Any other fixed answer language: the English note, then this.
ANSWER_IN = "Answer in {language}."

CAUTIOUS_EN = "I could not confirm a complete answer from the knowledge base. What the documents do say: {said}"
CAUTIOUS_JA = "ナレッジベースから完全な回答を確認できませんでした。文書に書かれていること: {said}"
CAUTIOUS_MISSING_EN = " They do not state: {missing}."
CAUTIOUS_MISSING_JA = " 文書に記載がないこと: {missing}。"

# Prompt order keeps the shared prefix first for llama.cpp's cache: the instructions, then the question,
# then the evidence that grows from hop to hop.
HOP_SYSTEM = (
    """You plan the next search for a question answered from documents, one step at a time.
Read the evidence found so far. If it states the answer to the question, set "next_query" to "".
Otherwise set "next_query" to ONE short search query for the missing piece: for a two-step question,
the second step, naming the entity the evidence found (for example "Where was Christopher Nolan
born?" once the evidence says Nolan directed the film). Write it in the language of the question.
Put in "found" the fact from the evidence the next query builds on ("" if none).
"""
    + QUOTED_DATA_RULE
)

HOP_USER = """Question: {question}

Evidence so far:
{evidence}

Already searched: {tried}"""

FOUND_FACTS = "(Facts found so far, step by step: {facts})"


# The planner's example of a second step that names the entity found, in the question's language: told to write
# Japanese beside an English example, the local model wrote a Japanese query that named no entity ("どのプランで…").
HOP_EXAMPLE = {"ja": 'In Japanese the example reads "クリストファー・ノーランはどこで生まれましたか？".'}


def written_in(question: str, what: str) -> str:
    """The rule naming the language the model writes ``what`` in, for a question whose script tells it ("" when it
    does not): a 1.5B model ignores "in the language of the question" and plans Japanese questions in English,
    whose queries the Japanese keyword index cannot match (as :meth:`Assistant.language_rule` does for answers)."""
    code = question_language(question)
    return f"Write {what} in {LANGUAGES[code]}, the language of the question." if code else ""
