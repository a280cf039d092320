"""Personal data detection (EN and JA), placeholders and their restoration, streamed or whole."""

from __future__ import annotations

import random

import pytest

from gateway.guardrails.pii import Finding, PiiDetector, luhn_valid, my_number_valid
from gateway.guardrails.vault import Vault


def my_number(body: str) -> str:
    """``body`` (11 digits) with the check digit that makes it a valid My Number."""
    return next(body + digit for digit in "0123456789" if my_number_valid(body + digit))


MY_NUMBER = my_number("12345678901")

# (text, category, value): one of each category, English and Japanese, in the forms people write them.
CASES = [
    ("Mail me at taro.yamada@example.co.jp please", "EMAIL", "taro.yamada@example.co.jp"),
    ("メールはtaro@example.jpへ送ってください", "EMAIL", "taro@example.jp"),
    ("Call 090-1234-5678 after six", "PHONE", "090-1234-5678"),
    ("電話番号は03-1234-5678です", "PHONE", "03-1234-5678"),
    ("携帯は０９０－１２３４－５６７８です", "PHONE", "０９０－１２３４－５６７８"),
    ("Reach me on +81 90-1234-5678 or later", "PHONE", "+81 90-1234-5678"),
    ("US office: (415) 555-0100", "PHONE", "(415) 555-0100"),
    ("Card 4111 1111 1111 1111 was charged", "CREDIT_CARD", "4111 1111 1111 1111"),
    ("カード番号5555555555554444で支払い", "CREDIT_CARD", "5555555555554444"),
    (f"マイナンバーは{MY_NUMBER}です", "MY_NUMBER", MY_NUMBER),
    (f"My Number {MY_NUMBER[:4]} {MY_NUMBER[4:8]} {MY_NUMBER[8:]} on file", "MY_NUMBER", None),
    ("The server 192.168.10.24 is down", "IP_ADDRESS", "192.168.10.24"),
    ("IPv6アドレスは2001:db8::8a2e:370:7334です", "IP_ADDRESS", "2001:db8::8a2e:370:7334"),
]


@pytest.mark.parametrize(("text", "category", "value"), CASES)
def test_each_category_is_found_in_english_and_japanese(text: str, category: str, value: str | None) -> None:
    found = PiiDetector().find(text)
    assert [f.category for f in found] == [category]
    if value is not None:
        assert text[found[0].start : found[0].end] == value


@pytest.mark.parametrize(
    "text",
    [
        "Which city was the director of the film Inception born in?",
        "The treaty was signed on 1969-07-20 and ratified in 1970.",
        "ISBN 978-3-16-148410-0 lists 1234567890 copies",
        "4111 1111 1111 1112 fails Luhn",  # one digit off a valid card
        f"{MY_NUMBER[:11]}{(int(MY_NUMBER[11]) + 1) % 10} is not a My Number",  # wrong check digit
        "Version 10.300.1.999 and 256.1.1.1 are not addresses; the meeting is at 10:30:45",
        "2011年3月11日に東北地方太平洋沖地震が発生した。人口は1234万人。",
    ],
)
def test_numbers_that_are_not_personal_data_are_left_alone(text: str) -> None:
    assert PiiDetector().find(text) == []


def test_validators() -> None:
    assert luhn_valid("4111111111111111")
    assert not luhn_valid("4111111111111112")
    assert my_number_valid(MY_NUMBER)
    assert sum(my_number_valid(MY_NUMBER[:11] + d) for d in "0123456789") == 1


class FakeNames:
    def __init__(self, *names: str) -> None:
        self._names = names

    def names(self, text: str) -> list[tuple[int, int]]:
        return [(text.index(n), text.index(n) + len(n)) for n in self._names if n in text]


def test_names_come_from_the_name_model_and_patterns_win_overlaps() -> None:
    text = "山田太郎 (taro@example.jp) called"
    found = PiiDetector(FakeNames("山田太郎", "taro@example.jp")).find(text)
    assert [(f.category, text[f.start : f.end]) for f in found] == [
        ("PERSON", "山田太郎"),
        ("EMAIL", "taro@example.jp"),
    ]


def test_masking_is_typed_numbered_and_stable_per_value() -> None:
    vault = Vault()
    text = "Write to a@example.com and b@example.org, again a@example.com; call 090-1234-5678"
    masked = vault.mask(text, PiiDetector().find(text))
    assert masked == "Write to <EMAIL_1> and <EMAIL_2>, again <EMAIL_1>; call <PHONE_1>"
    assert vault.categories == ["EMAIL", "PHONE"]
    assert vault.restore(masked) == text
    # Small models drop the brackets; a placeholder glued into a longer word is not one.
    assert vault.restore("Sent to EMAIL_2 and xEMAIL_1 EMAIL_12.") == "Sent to b@example.org and xEMAIL_1 EMAIL_12."


def test_a_second_text_reuses_the_vault() -> None:
    vault = Vault()
    first = "my mail is a@example.com"
    second = "send it to a@example.com and c@example.com"
    vault.mask(first, PiiDetector().find(first))
    assert vault.mask(second, PiiDetector().find(second)) == "send it to <EMAIL_1> and <EMAIL_2>"


@pytest.mark.parametrize("seed", range(40))
def test_streamed_pieces_restore_to_the_whole_answers_restoration(seed: int) -> None:
    vault = Vault()
    text = "a@example.com b@example.org 090-1234-5678"
    vault.mask(text, PiiDetector().find(text))
    answer = "Sure: <EMAIL_1>, EMAIL_2 and <PHONE_1>. fooEMAIL_1 EMAIL_12 <EMAIL_1"
    rng = random.Random(seed)
    restorer, out, i = vault.streaming(), "", 0
    while i < len(answer):
        size = rng.randint(1, 6)
        out += restorer.feed(answer[i : i + size])
        i += size
    out += restorer.flush()
    assert out == vault.restore(answer)
    assert "a@example.com" in out
    assert "090-1234-5678" in out


def test_overlapping_findings_keep_the_earliest_longest() -> None:
    assert PiiDetector(FakeNames("Taro")).find("Taro") == [Finding("PERSON", 0, 4)]
