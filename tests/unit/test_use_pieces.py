"""The kept per-piece rows of the local embedding model (issue 17): least recently used out, never a text's own."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gateway.providers.use_pieces import PieceRows

WIDTH = 4


def rows_of(pieces: list[int]) -> np.ndarray:
    return np.repeat(np.asarray(pieces, dtype=np.float32)[:, None], WIDTH, axis=1)


class Counting:
    """A row per piece id (its id in every column), recording what was computed together."""

    def __init__(self) -> None:
        self.runs: list[list[int]] = []

    @property
    def computed(self) -> list[int]:
        return [piece for run in self.runs for piece in run]

    def __call__(self, pieces: list[int]) -> np.ndarray:
        self.runs.append(list(pieces))
        return rows_of(pieces)


def test_rows_come_in_the_texts_order_and_each_piece_is_computed_once() -> None:
    compute = Counting()
    rows = PieceRows(compute, WIDTH, capacity=8)
    got = rows.rows([5, 7, 5, 9])
    assert got[:, 0].tolist() == [5, 7, 5, 9]
    assert compute.runs == [[5, 7, 9]]  # the missing pieces together, once each
    again = rows.rows([9, 7])
    assert again[:, 0].tolist() == [9, 7]
    assert compute.computed == [5, 7, 9]  # kept
    assert (rows.hits, rows.misses) == (2, 3)
    assert len(rows) == 3
    assert rows.nbytes == 3 * WIDTH * 4


def test_the_least_recently_used_piece_goes_first() -> None:
    compute = Counting()
    rows = PieceRows(compute, WIDTH, capacity=3)
    rows.rows([1, 2, 3])
    rows.rows([1])  # 2 is now the least recent
    rows.rows([4])
    compute.runs.clear()
    rows.rows([1, 3, 4])
    assert compute.computed == []
    rows.rows([2])
    assert compute.computed == [2]


def test_a_full_store_never_evicts_a_piece_of_the_text_it_serves() -> None:
    compute = Counting()
    rows = PieceRows(compute, WIDTH, capacity=3)
    rows.rows([1, 2, 3])
    got = rows.rows([3, 4, 2])  # 1 is the only row that may go
    assert got[:, 0].tolist() == [3, 4, 2]
    compute.runs.clear()
    assert rows.rows([2, 3, 4])[:, 0].tolist() == [2, 3, 4]
    assert compute.computed == []


def test_a_text_with_more_pieces_than_kept_is_computed_and_changes_nothing_kept() -> None:
    compute = Counting()
    rows = PieceRows(compute, WIDTH, capacity=2)
    rows.rows([1, 2])
    assert rows.rows([3, 4, 5, 3])[:, 0].tolist() == [3, 4, 5, 3]
    assert compute.runs[-1] == [3, 4, 5]
    compute.runs.clear()
    rows.rows([1, 2])
    assert compute.computed == []


def test_rows_returned_are_copies_later_texts_cannot_overwrite() -> None:
    rows = PieceRows(Counting(), WIDTH, capacity=1)
    first = rows.rows([1])
    rows.rows([2])  # takes the only slot
    assert first[:, 0].tolist() == [1]


def test_nothing_kept_computes_every_time() -> None:
    compute = Counting()
    rows = PieceRows(compute, WIDTH, capacity=0)
    rows.rows([1, 1])
    rows.rows([1])
    assert compute.computed == [1, 1]
    assert rows.rows([]).shape == (0, WIDTH)
    with pytest.raises(ValueError, match="capacity"):
        PieceRows(compute, WIDTH, capacity=-1)


def test_threads_sharing_the_store_each_get_their_own_rows() -> None:
    rows = PieceRows(rows_of, WIDTH, capacity=16)
    failures: list[str] = []

    def embed(offset: int) -> None:
        for step in range(300):
            ids = [(offset * 7 + step + k) % 40 for k in range(5)]
            got = rows.rows(ids)
            if got[:, 0].tolist() != ids:
                failures.append(f"{ids} -> {got[:, 0].tolist()}")

    threads = [threading.Thread(target=embed, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
