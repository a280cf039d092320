"""The hybrid evaluator: weighted rules, the LLM judge, and rules alone when the judge's reply is malformed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from gateway.curation.evaluator import HybridEvaluator, Rule
from gateway.errors import ClientError
from gateway.providers.llm import LLMClient
from gateway.settings import ModelPrice
from tests.fakes.scripted_chat import ScriptedChatModel


def _llm(reply: str) -> LLMClient:
    def respond(_: list[BaseMessage], __: dict[str, Any]) -> str:
        return reply

    return LLMClient(ScriptedChatModel(responder=respond), model_name="scripted", price=ModelPrice())


RULES = [
    Rule("must_contain", "神南2-3-4", 2.0),
    Rule("must_not_contain", "丸の内", 1.0),
    Rule("pattern", r"2024年0?4月", 1.0),
]


async def test_rules_and_judge_are_weighted_together() -> None:
    judge = _llm(json.dumps({"score": 0.5, "reason": "partly right"}))
    score = await HybridEvaluator(judge).score("q", "本社は渋谷区神南２−３−４です。", RULES)
    # Full-width digits and the minus sign fold to "2-3-4"; no date: the pattern fails.
    assert [r["passed"] for r in score.rules] == [True, True, False]
    assert score.score == pytest.approx((2.0 + 1.0 + 0.5) / 5.0, abs=1e-4)
    assert score.judge == {"score": 0.5, "reason": "partly right", "weight": 1.0}


async def test_a_malformed_judge_leaves_the_rules_to_score() -> None:
    score = await HybridEvaluator(_llm("not json")).score("q", "2024年4月に神南2-3-4へ移転", RULES)
    assert score.judge is None
    assert score.score == 1.0


def test_bad_rules_are_the_callers_to_fix() -> None:
    with pytest.raises(ClientError):
        Rule("pattern", "([unclosed")
    with pytest.raises(ClientError):
        Rule("must_contain", "x", 0.0)
