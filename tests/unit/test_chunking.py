"""Chunking for retrieval: bounded chunks, split at sentence ends in English and Japanese."""

from __future__ import annotations

from itertools import pairwise

import pytest

from gateway.knowledge.chunking import Chunker

EN_SENTENCES = [f"Rule {i} of the travel policy covers hotel bookings for trips abroad." for i in range(12)]
JA_SENTENCES = [f"東京オフィスの第{i}会議室は十人まで利用できます。" for i in range(20)]


def english_text() -> str:
    return " ".join(EN_SENTENCES[:6]) + "\n\n" + " ".join(EN_SENTENCES[6:])


def test_short_text_is_one_chunk() -> None:
    assert Chunker(200, 40).split("The VPN policy was updated in March.") == ["The VPN policy was updated in March."]


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t  \n", "\u3000 \n"])
def test_whitespace_only_text_gives_no_chunks(text: str) -> None:
    assert Chunker(200, 40).split(text) == []


@pytest.mark.parametrize(("size", "overlap"), [(100, 20), (160, 60), (250, 100), (400, 0)])
def test_every_chunk_fits_the_size(size: int, overlap: int) -> None:
    chunker = Chunker(size, overlap)
    for text in (english_text(), "".join(JA_SENTENCES), "word " * 300, "あ" * 1000):
        chunks = chunker.split(text)
        assert chunks
        assert all(0 < len(chunk) <= size for chunk in chunks), [len(c) for c in chunks]


def test_overlap_larger_than_half_the_size_is_clamped() -> None:
    """The splitter rejects overlap >= size; the chunker keeps it at half the size instead."""
    chunks = Chunker(100, 500).split(english_text())
    assert len(chunks) > 1
    assert all(len(chunk) <= 100 for chunk in chunks)


def test_long_english_text_splits_at_sentence_and_paragraph_boundaries() -> None:
    chunks = Chunker(200, 80).split(english_text())
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.startswith("Rule "), chunk
        assert chunk.endswith("abroad."), chunk
        assert "\n\n" not in chunk  # the paragraph break is the first place to split
        # whole sentences only
        assert chunk.count("Rule ") == chunk.count("abroad.")
    # no chunk mixes the two paragraphs
    first_paragraph, second_paragraph = set(EN_SENTENCES[:6]), set(EN_SENTENCES[6:])
    for chunk in chunks:
        inside = {s for s in EN_SENTENCES if s in chunk}
        assert inside <= first_paragraph or inside <= second_paragraph, chunk


def test_neighbouring_chunks_overlap_within_a_paragraph() -> None:
    chunks = Chunker(200, 80).split(" ".join(EN_SENTENCES))
    assert len(chunks) > 2
    for before, after in pairwise(chunks):
        shared = [s for s in EN_SENTENCES if s in before and s in after]
        assert shared, (before, after)


def test_without_overlap_neighbours_share_nothing() -> None:
    chunks = Chunker(200, 0).split(" ".join(EN_SENTENCES))
    assert len(chunks) > 2
    for before, after in pairwise(chunks):
        assert not [s for s in EN_SENTENCES if s in before and s in after]


def test_japanese_without_spaces_splits_at_the_full_stop() -> None:
    text = "".join(JA_SENTENCES)
    assert " " not in text
    chunks = Chunker(100, 30).split(text)
    assert len(chunks) > 3
    for chunk in chunks:
        assert len(chunk) <= 100
        assert chunk.startswith("東京オフィス"), chunk
        assert chunk.endswith("。"), chunk


@pytest.mark.parametrize(
    ("text", "sentences", "size"),
    [
        (english_text(), EN_SENTENCES, 150),
        (" ".join(EN_SENTENCES), EN_SENTENCES, 300),
        ("".join(JA_SENTENCES), JA_SENTENCES, 80),
        ("\n".join(JA_SENTENCES), JA_SENTENCES, 120),
    ],
)
def test_no_text_is_lost(text: str, sentences: list[str], size: int) -> None:
    chunks = Chunker(size, size // 4).split(text)
    for sentence in sentences:
        assert any(sentence in chunk for chunk in chunks), sentence


def test_a_sentence_longer_than_the_size_is_still_cut_to_size() -> None:
    sentence = "The policy " + "really " * 60 + "matters."
    chunks = Chunker(100, 20).split(sentence)
    assert len(chunks) > 1
    assert all(len(chunk) <= 100 for chunk in chunks)
    words = set(sentence.split())
    assert words == {w for chunk in chunks for w in chunk.split()}
