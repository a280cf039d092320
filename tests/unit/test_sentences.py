"""The answer's sentences: where English and Japanese sentences end, and the same cut however the text arrives."""

from __future__ import annotations

import re

import pytest

from pipelines.shared.sentences import Sentence, SentenceSplitter, split_sentences


def texts(text: str) -> list[str]:
    return [s.text for s in split_sentences(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris is the capital. It is in France.", ["Paris is the capital.", "It is in France."]),
        ("Really? Yes! It is.", ["Really?", "Yes!", "It is."]),
        # Citations after the stop belong to the sentence they cite.
        ("It fell in 1066. [2] Then came William [1].", ["It fell in 1066. [2]", "Then came William [1]."]),
        ("It fell in 1066.[2][3] Then it grew.", ["It fell in 1066.[2][3]", "Then it grew."]),
        # Abbreviations, initials, decimals, list numbers and names with dots end nothing.
        ("Dr. Smith met Mr. Jones at St. Paul's.", ["Dr. Smith met Mr. Jones at St. Paul's."]),
        ("J. K. Rowling wrote it.", ["J. K. Rowling wrote it."]),
        ("Sales grew 3.5 percent in the U.S. last year.", ["Sales grew 3.5 percent in the U.S. last year."]),
        ("Use e.g. the portal or example.com instead.", ["Use e.g. the portal or example.com instead."]),
        ("1. Open the portal.\n2. Sign in.", ["1. Open the portal.", "2. Sign in."]),
        # A lower-case word after a stop continues the sentence.
        ("It costs approx. ten euros.", ["It costs approx. ten euros."]),
        # Line breaks end list items.
        ("Steps:\n- open the form\n- sign it", ["Steps:", "- open the form", "- sign it"]),
        # Japanese: 。！？ end a sentence, no space needed; citations stay with it.
        ("梅雨は6月に始まる。[1]7月に終わる！本当？", ["梅雨は6月に始まる。[1]", "7月に終わる！", "本当？"]),
        ("「雨が多い。」と言われる。", ["「雨が多い。」", "と言われる。"]),
        ("No stop at the end [1]", ["No stop at the end [1]"]),
    ],
)
def test_sentences_end_where_a_reader_would_end_them(text: str, expected: list[str]) -> None:
    assert texts(text) == expected


ANSWERS = [
    "Harold II died at the Battle of Hastings in 1066. [1] Dr. Smith said e.g. the U.S. grew 3.5 percent! Was it? "
    "Yes [2].\n- item one\n1. First step. Then J. K. Rowling wrote it.",
    "マーラーは1907年に指揮者となった。[1] 彼はウィーンを去った！本当？はい。[2]",
    "The K9 carries 40 kg [1]. It flies over rivers [2]",
]


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("piece", ["char", "word", "whole"])
def test_fed_in_any_pieces_the_sentences_are_those_of_the_whole_text(answer: str, piece: str) -> None:
    pieces = {"char": list(answer), "word": re.findall(r"\s*\S+|\s+", answer), "whole": [answer]}[piece]
    splitter = SentenceSplitter()
    cut: list[Sentence] = []
    for text in pieces:
        cut += splitter.feed(text)
    cut += splitter.close()
    assert cut == split_sentences(answer)
    assert "".join(s.raw for s in cut) == answer.rstrip()


def test_a_sentence_is_released_once_the_next_word_shows_it_ended() -> None:
    splitter = SentenceSplitter()
    assert splitter.feed("It fell in 1066.") == []  # a citation or a lower-case word may follow
    assert splitter.feed(" [") == []  # a citation is arriving
    assert splitter.feed("2]") == []
    assert splitter.feed(" Then") == [Sentence(lead="", text="It fell in 1066. [2]")]
    assert splitter.close() == [Sentence(lead=" ", text="Then")]
