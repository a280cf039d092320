"""The relocation scenario shared by the curation cycle tests (API, PostgreSQL, browser)."""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import BaseMessage

from tests.scripted import structured_reply

TENANT = "acme"
QUESTION = "現在の本社オフィスの住所を教えてください。"
OLD_DOC = {
    "id": "office-2019",
    "title": "本社オフィスの所在地",
    "text": "当社の本社オフィスは東京都千代田区丸の内1-1-1 丸の内ビル5階にあります。受付は平日9時から18時までです。",
}
OTHER_DOCS = [
    {
        "id": "vacation",
        "title": "休暇制度",
        "text": "年次有給休暇は入社半年後に10日付与されます。申請は勤怠システムから行います。",
    },
    {
        "id": "expenses",
        "title": "経費精算",
        "text": "経費は発生から30日以内に精算システムで申請してください。領収書の画像を添付します。",
    },
]
NEW_DOC = {
    "id": "office-2024",
    "title": "本社オフィス移転のお知らせ",
    "text": "2024年4月1日、本社オフィスは東京都渋谷区神南2-3-4 神南タワー10階に移転しました。"
    "旧所在地での業務は終了しています。",
}
NEW_ADDRESS = "渋谷区神南2-3-4"
OLD_AS_CURRENT = "丸の内ビル5階にあります"
RULES = [
    {"kind": "must_contain", "value": NEW_ADDRESS, "weight": 2.0},
    {"kind": "must_not_contain", "value": OLD_AS_CURRENT, "weight": 2.0},
    {"kind": "pattern", "value": r"2024年0?4月0?1日", "weight": 1.0},
]
# The rules as the review page's form takes them (one per line, "weight | text").
FORM_RULES = {
    "must_contain": f"2 | {NEW_ADDRESS}",
    "must_not_contain": f"2 | {OLD_AS_CURRENT}",
    "pattern": RULES[2]["value"],
}


def _passages(prompt: str) -> list[str]:
    return [m.split(") ", 1)[1].strip() for m in re.findall(r"\[\d+\] (.*?)(?=\n\n\[\d+\] |\Z)", prompt, re.S)]


def relocation_model(messages: list[BaseMessage], kwargs: dict[str, Any]) -> str:
    """A scripted model: answers from the passage announcing a move if there is one (as a careful model
    would), else from the first; the judge scores an answer naming the new address high."""
    prompt = str(messages[-1].content)
    if "Answer to grade" in prompt:
        graded = prompt.split("Answer to grade:", 1)[1]
        if NEW_ADDRESS in graded:
            return json.dumps({"score": 1.0, "reason": "states the new Shibuya address and the move date"})
        return json.dumps({"score": 0.2, "reason": "gives the old Marunouchi address as current"})
    structured = structured_reply(kwargs)
    if structured is not None:
        return structured
    if "Context passages" not in prompt:
        return "こんにちは。"
    passages = _passages(prompt.split("Context passages", 1)[1])
    index = next((i for i, p in enumerate(passages) if "移転" in p), 0)
    return f"{passages[index].split(chr(10) + chr(10), 1)[0]} [{index + 1}]" if passages else "わかりません。"
