"""The embedder cost benchmark's helpers: what it reads of /proc, and the chunks it ingests."""

from __future__ import annotations

import math

import pytest

from gateway.knowledge.chunking import Chunker
from gateway.settings import ChunkingSettings
from tests.benchmarks.embedder_cost import documents, rotated, vm_rss_mib

STATUS = "Name:\tpython\nVmPeak:\t 2048000 kB\nVmHWM:\t  900000 kB\nVmRSS:\t  524288 kB\nRssAnon:\t  400000 kB\n"


def test_the_resident_size_is_vmrss_not_the_peak() -> None:
    assert vm_rss_mib(STATUS) == 512.0


def test_a_process_without_resident_memory_reads_nan() -> None:
    assert math.isnan(vm_rss_mib("Name:\tpython\nState:\tZ (zombie)\n"))


def test_a_unit_other_than_kb_is_refused() -> None:
    with pytest.raises(ValueError, match="not kB"):
        vm_rss_mib("VmRSS:\t 512 MB\n")


@pytest.mark.parametrize("chunks", [1, 37, 10_000])
def test_the_documents_hold_exactly_the_chunks_asked_nearly_all_distinct(chunks: int) -> None:
    """The ingestion's figure is per chunk: the knowledge base's own chunker must cut the documents into exactly the
    count asked, and the texts timed in part 2 must be the ones ingestion embeds (title, then chunk)."""
    chunking = ChunkingSettings()
    chunker = Chunker(chunking.size, chunking.overlap)
    made, texts = documents(chunks, chunker)
    cut = [(d.title, piece) for d in made for piece in chunker.split(d.text)]
    assert len(cut) == len(texts) == chunks
    assert texts == [f"{title}\n{piece}" for title, piece in cut]
    # Passages come back in later rounds with their sentences turned: a few chunks inside one long sentence repeat.
    assert len(set(texts)) >= 0.95 * chunks
    assert len({d.id for d in made}) == len(made)


def test_a_rotated_passage_begins_at_its_turned_sentence_and_keeps_every_one() -> None:
    text = "First one. Second one! Third one? 第四。第五。"
    assert rotated(text, 0) == "First one. Second one! Third one? 第四。 第五。"
    assert rotated(text, 2) == "Third one? 第四。 第五。 First one. Second one!"
    assert rotated(text, 5) == rotated(text, 0)  # modulo the sentence count
    assert rotated("No end mark", 3) == "No end mark"
