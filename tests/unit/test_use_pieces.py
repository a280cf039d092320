"""The kept per-piece rows of the local embedding model: least recently used out, rows in use pinned."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gateway.providers.use_pieces import PieceLookup, PieceRows

WIDTH = 4


def rows_of(pieces: list[int]) -> np.ndarray:
    """The row a piece id would have: its id in every column."""
    return np.repeat(np.asarray(pieces, dtype=np.float32)[:, None], WIDTH, axis=1)


def rows(store: PieceRows, lookup: PieceLookup, computed: np.ndarray) -> np.ndarray:
    """Each token's row, given the missing pieces' rows (in ``missing``'s order): what the encoder's graph gathers."""
    return np.concatenate([store.store[lookup.slots], computed])[lookup.index]


def embed(store: PieceRows, ids: list[int], computed: list[int] | None = None) -> np.ndarray:
    """What the encoder does with the store: look up, compute what is missing (recorded), keep it, assemble."""
    lookup = store.lookup(ids)
    if computed is not None:
        computed.extend(lookup.missing)
    new = rows_of(lookup.missing) if lookup.missing else np.zeros((0, WIDTH), dtype=np.float32)
    assembled = rows(store, lookup, new)  # as the run reads them, before it settles
    store.settle(lookup, new)
    return assembled


def test_rows_come_in_the_texts_order_and_each_missing_piece_is_computed_once() -> None:
    store = PieceRows(WIDTH, capacity=8)
    first = store.lookup([5, 7, 5, 9])
    assert first.missing == [5, 7, 9]  # once each, in order of first use
    assert first.slots.shape == (0,)
    assert rows(store, first, rows_of(first.missing))[:, 0].tolist() == [5, 7, 5, 9]
    store.settle(first, rows_of(first.missing))
    again = store.lookup([9, 7, 11])
    assert again.missing == [11]
    assert rows(store, again, rows_of([11]))[:, 0].tolist() == [9, 7, 11]
    assert store.pinned == 2
    store.settle(again, rows_of([11]))
    assert store.pinned == 0
    assert (store.hits, store.misses) == (2, 4)
    assert len(store) == 4
    assert store.nbytes == 4 * WIDTH * 4


def test_the_least_recently_used_piece_goes_first() -> None:
    store = PieceRows(WIDTH, capacity=3)
    embed(store, [1, 2, 3])
    embed(store, [1])  # 2 is now the least recent
    embed(store, [4])
    computed: list[int] = []
    embed(store, [1, 3, 4], computed)
    assert computed == []
    embed(store, [2], computed)
    assert computed == [2]


def test_a_row_in_use_is_not_written_over_until_its_run_settles() -> None:
    store = PieceRows(WIDTH, capacity=1)
    embed(store, [1])
    held = store.lookup([1])  # a run that reads piece 1's row has not ended
    computed: list[int] = []
    embed(store, [2], computed)  # the only row is in use: 2 is computed and not kept
    assert rows(store, held, np.zeros((0, WIDTH), dtype=np.float32))[:, 0].tolist() == [1]
    embed(store, [2], computed)
    assert computed == [2, 2]
    store.settle(held, np.zeros((0, WIDTH), dtype=np.float32))
    embed(store, [2], computed)  # now it takes the row
    embed(store, [2], computed)
    assert computed == [2, 2, 2]
    assert store.lookup([1]).missing == [1]


def test_a_failed_run_unpins_its_rows_and_keeps_nothing() -> None:
    store = PieceRows(WIDTH, capacity=2)
    embed(store, [1])
    failed = store.lookup([1, 2])
    store.settle(failed, None)
    assert (store.pinned, len(store)) == (0, 1)
    assert store.lookup([2]).missing == [2]


def test_a_text_with_more_pieces_than_kept_is_computed_and_changes_nothing_kept() -> None:
    store = PieceRows(WIDTH, capacity=2)
    embed(store, [1, 2])
    computed: list[int] = []
    assert embed(store, [3, 4, 5, 3], computed)[:, 0].tolist() == [3, 4, 5, 3]
    assert computed == [3, 4, 5]
    computed.clear()
    embed(store, [1, 2], computed)
    assert computed == []


def test_a_piece_kept_meanwhile_by_another_text_is_kept_once() -> None:
    store = PieceRows(WIDTH, capacity=4)
    a, b = store.lookup([1, 2]), store.lookup([2, 3])  # both lack 2: each computes it
    store.settle(a, rows_of(a.missing))
    store.settle(b, rows_of(b.missing))
    assert len(store) == 3
    computed: list[int] = []
    assert embed(store, [3, 2, 1], computed)[:, 0].tolist() == [3, 2, 1]
    assert computed == []


def test_nothing_kept_computes_every_time() -> None:
    store = PieceRows(WIDTH, capacity=0)
    computed: list[int] = []
    embed(store, [1, 1], computed)
    embed(store, [1], computed)
    assert computed == [1, 1]
    assert embed(store, []).shape == (0, WIDTH)
    with pytest.raises(ValueError, match="capacity"):
        PieceRows(WIDTH, capacity=-1)


def test_threads_sharing_the_store_each_get_their_own_rows() -> None:
    store = PieceRows(WIDTH, capacity=16)
    failures: list[str] = []

    def run(offset: int) -> None:
        for step in range(300):
            ids = [(offset * 7 + step + k) % 40 for k in range(5)]
            got = embed(store, ids)
            if got[:, 0].tolist() != ids:
                failures.append(f"{ids} -> {got[:, 0].tolist()}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_resident_rows_are_read_first_and_never_make_room() -> None:
    store = PieceRows(WIDTH, capacity=2, resident=3)
    embed(store, [7])  # a recent row for 7, before it becomes resident
    store.reside([7, 8, 9], rows_of([7, 8, 9]) + 0.5)  # told apart from computed rows by the half
    assert len(store) == 4
    got = embed(store, [1, 7, 2, 8])
    assert got[:, 0].tolist() == [1, 7.5, 2, 8.5]  # the resident row, not the recent one
    computed: list[int] = []
    for ids in ([3, 4], [5, 6], [9, 1]):  # the recent rows turn over
        embed(store, ids, computed)
    assert computed == [3, 4, 5, 6, 1]  # 9 resident, 7's old row never read
    assert embed(store, [8, 9, 7], computed)[:, 0].tolist() == [8.5, 9.5, 7.5]
    assert computed == [3, 4, 5, 6, 1]
    assert store.pinned == 0


def test_a_text_too_long_to_keep_still_reads_the_resident_rows() -> None:
    store = PieceRows(WIDTH, capacity=1, resident=1)
    store.reside([4], rows_of([4]) + 0.5)
    computed: list[int] = []
    assert embed(store, [1, 4, 2], computed)[:, 0].tolist() == [1, 4.5, 2]
    assert computed == [1, 2]
    assert len(store) == 1  # nothing of the long text kept


def test_resident_rows_have_a_fixed_room() -> None:
    store = PieceRows(WIDTH, capacity=0, resident=2)
    store.reside([1, 2], rows_of([1, 2]))
    store.reside([2], rows_of([2]))  # already resident: takes no room
    with pytest.raises(ValueError, match="room for 2"):
        store.reside([3], rows_of([3]))
    with pytest.raises(ValueError, match="rows"):
        store.reside([3, 4], rows_of([3]))
    with pytest.raises(ValueError, match="resident"):
        PieceRows(WIDTH, capacity=0, resident=-1)
    assert store.lookup([2, 1, 3]).missing == [3]
