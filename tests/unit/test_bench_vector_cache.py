"""The offline fits' vector cache: a text is embedded once per encoder side, and another side never reads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from routes.offline.training.encoders import BATCH, VectorCache


class CountingEmbed:
    def __init__(self, offset: float = 0.0) -> None:
        self.calls: list[list[str]] = []
        self.offset = offset

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.asarray([[len(t) + self.offset, 1.0] for t in texts], dtype=np.float32)


def test_a_cached_text_is_read_back_not_embedded_again(tmp_path: Path) -> None:
    raw = CountingEmbed()
    embed = VectorCache(tmp_path).cached("enc:query", raw)
    first = embed(["a", "bb", "a"])
    assert raw.calls == [["a", "bb"]]  # a repeated text is embedded once
    assert first.tolist() == [[1.0, 1.0], [2.0, 1.0], [1.0, 1.0]]
    # A new cache object over the same directory (the next run) embeds only the new text.
    again = VectorCache(tmp_path).cached("enc:query", raw)(["bb", "ccc"])
    assert raw.calls[1:] == [["ccc"]]
    assert again.tolist() == [[2.0, 1.0], [3.0, 1.0]]


def test_each_key_keeps_its_own_vectors(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path)
    queries, passages = CountingEmbed(), CountingEmbed(offset=10.0)
    assert cache.cached("e5:query", queries)(["same"])[0, 0] == 4.0
    assert cache.cached("e5:passage", passages)(["same"])[0, 0] == 14.0
    assert len(passages.calls) == 1


def test_missing_texts_are_embedded_in_batches(tmp_path: Path) -> None:
    raw = CountingEmbed()
    texts = [f"text {i}" for i in range(BATCH + 3)]
    out = VectorCache(tmp_path).cached("k", raw)(texts)
    assert [len(c) for c in raw.calls] == [BATCH, 3]
    assert out.shape == (BATCH + 3, 2)
    assert VectorCache(tmp_path).cached("k", raw)([]).size == 0
