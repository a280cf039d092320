"""Entity links: what a passage is about and what it mentions, in English and Japanese; the second hop of a bridge
question found through them when neither the question's vector nor its words find it; links kept right by
upserts and deletes; the same links from the store and from the in-memory matrix."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from gateway.cache.backend import MemoryBackend
from gateway.cache.versions import KnowledgeVersions
from gateway.errors import ProviderError
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.matrices import TenantMatrices
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from pipelines.shared.deps import Passage
from pipelines.shared.links import about_keys, mention_keys
from pipelines.shared.text import content_terms
from pipelines.shared.visibility import Visibility
from tests.fakes.memory_store import InMemoryVectorStore


def test_a_title_is_about_its_name_without_the_disambiguator() -> None:
    assert about_keys("Kiss and Tell (1945 film)") == {"kiss and tell"}
    assert about_keys("Edward Stafford, 4th Baron Stafford") == {
        "edward stafford, 4th baron stafford",
        "edward stafford",
    }
    assert about_keys("株式会社ミナトソフト") >= {"株式会社ミナトソフト", "ミナトソフト"}
    assert about_keys("The") == frozenset()


def test_a_text_mentions_its_names_and_every_shorter_name_inside_them() -> None:
    keys = mention_keys(
        "In 1972 Shirley Temple Black was named ambassador to Ghana by the Institute of Arts and Letters."
    )
    assert {"shirley temple", "shirley temple black", "temple black", "ghana", "institute of arts and letters"} <= keys
    assert not {"the", "in", "1972"} & keys
    # Title Case text is not one long name: a 60-word run gives its words and pairs, not every span of seven.
    heading = " ".join(f"Word{i}" for i in range(60))
    assert len(mention_keys(heading)) == 60 + 59
    assert {"ミナトソフト", "佐伯遥", "代表取締役"} <= mention_keys(
        "タスクノートを提供する会社はミナトソフトで、代表取締役は佐伯遥です。"
    )


FILM = NewDocument(
    id="lights",
    title="Harbour Lights (1951 film)",
    text="Harbour Lights is a 1951 comedy in which Mara Quill plays Nell Brandt, the lighthouse keeper's daughter.",
)
ACTRESS = NewDocument(
    id="quill",
    title="Mara Quill",
    text="Mara Quill was elected mayor of Dunmore in 1972, after retiring from the stage.",
)
QUESTION = "Which town did the performer who portrayed Nell Brandt in Harbour Lights later govern?"
DISTRACTORS = [
    NewDocument(
        id=f"town-{i}",
        title=f"{name} town council",
        text=f"The town council of {name} governs the harbour "
        f"district; its performers' guild lights the {word} each winter, and later the council elects a new head.",
    )
    for i, (name, word) in enumerate(
        [
            ("Pellow", "quay"),
            ("Arnmouth", "pier"),
            ("Castor", "square"),
            ("Wendle", "bridge"),
            ("Ossing", "market"),
            ("Fallow", "green"),
            ("Marrick", "church"),
            ("Tolley", "mill"),
            ("Brantham", "beacon"),
            ("Quarley", "gate"),
        ]
    )
]


async def unlinked(documents: list[NewDocument]) -> KnowledgeBase:
    """The films tenant on the real embeddings, links off until a test turns them on."""
    knowledge = KnowledgeBase(USEEmbeddings(), InMemoryVectorStore(), Chunker(700, 100), links=False)
    await knowledge.ingest("films", documents)
    return knowledge


async def test_the_second_hop_is_found_through_the_links_alone() -> None:
    # The actress's page shares no content word with the question: only the film's page names her.
    assert not set(content_terms(QUESTION)) & set(content_terms(f"{ACTRESS.title}\n{ACTRESS.text}"))
    knowledge = await unlinked([FILM, ACTRESS, *DISTRACTORS])
    without = await knowledge.search("films", QUESTION, 4, visibility=Visibility.everything())
    assert "lights" in {p.doc_id for p in without}
    assert "quill" not in {
        p.doc_id for p in await knowledge.search("films", QUESTION, 8, visibility=Visibility.everything())
    }
    knowledge.links = True
    # At the corrective route's depth (``multi_hop_top_k``): the links join the fusion beside both searches, so a
    # passage only they find ranks behind the passages both searches agree on.
    found = [p.doc_id for p in await knowledge.search("films", QUESTION, 8, visibility=Visibility.everything())]
    assert found[0] == "lights"
    assert "quill" in found


JA_FILM = NewDocument(
    id="asagiri",
    title="朝霧の渡し (映画)",
    text="「朝霧の渡し」は1951年の喜劇映画で、渡し守の娘ナツを水野カオリが演じた。",
)
JA_ACTRESS = NewDocument(id="mizuno", title="水野カオリ", text="水野カオリは1972年に汐見市の市長に選ばれた。")
JA_QUESTION = "「朝霧の渡し」でナツを演じた俳優は、後年どんな役職に就いたか？"
JA_DISTRACTORS = [
    NewDocument(
        id=f"ja-town-{i}",
        title=f"{name}町の渡し船",
        text=f"{name}町の渡し船は朝霧の出る季節に運休する。町の俳優たちは後年、{word}で芝居を演じ、役職を退いた者も集まる。",
    )
    for i, (name, word) in enumerate(
        [
            ("川辺", "公民館"),
            ("北浜", "神社"),
            ("西原", "港"),
            ("東谷", "広場"),
            ("南沢", "市場"),
            ("上野原", "橋"),
            ("下田", "寺"),
            ("中島", "学校"),
            ("大井", "劇場"),
            ("小松", "駅前"),
        ]
    )
]


async def test_the_second_hop_is_found_through_japanese_names_too() -> None:
    # The actress's page shares no content word with the question; the film's page names her (水野 + カオリ).
    assert not set(content_terms(JA_QUESTION)) & set(content_terms(f"{JA_ACTRESS.title}\n{JA_ACTRESS.text}"))
    knowledge = await unlinked([JA_FILM, JA_ACTRESS, *JA_DISTRACTORS])
    first = await knowledge.search("films", JA_QUESTION, 4, visibility=Visibility.everything())
    assert "asagiri" in {p.doc_id for p in first}
    assert "mizuno" not in {
        p.doc_id for p in await knowledge.search("films", JA_QUESTION, 8, visibility=Visibility.everything())
    }
    vector = await knowledge.embed_query(JA_QUESTION)
    assert [
        p.doc_id for p in await knowledge.linked("films", vector, first, 8, visibility=Visibility.everything())
    ] == ["mizuno"]
    # Fused with both searches, a passage only the links find ranks behind the ten distractors both searches agree
    # on: the links feed the fusion, they do not outvote it.
    knowledge.links = True
    fused = [p.doc_id for p in await knowledge.search("films", JA_QUESTION, 16, visibility=Visibility.everything())]
    assert fused[0] == "asagiri"
    assert "mizuno" in fused


async def test_links_follow_upserts_and_deletes_without_rewriting_other_documents() -> None:
    store = InMemoryVectorStore()
    knowledge = KnowledgeBase(DeterministicFakeEmbedding(size=16), store, Chunker(700, 100), links=True)
    await knowledge.ingest("films", [FILM])
    vector = await knowledge.embed_query(QUESTION)
    seeds = await knowledge.search("films", QUESTION, 1, visibility=Visibility.everything())

    async def linked() -> list[str]:
        return [p.doc_id for p in await knowledge.linked("films", vector, seeds, 5, visibility=Visibility.everything())]

    assert await linked() == []  # nobody is about Mara Quill yet
    await knowledge.ingest("films", [ACTRESS])
    assert await linked() == ["quill"]  # a page added later is linked from the pages that already name her
    assert await knowledge.delete("films", "quill")
    assert await linked() == []
    await knowledge.ingest("films", [ACTRESS])
    renamed = NewDocument(id="lights", title=FILM.title, text="Harbour Lights is a 1951 comedy set in a lighthouse.")
    await knowledge.ingest("films", [renamed])
    seeds = await knowledge.search("films", QUESTION, 1, visibility=Visibility.everything())
    assert await linked() == []  # the film's new text names nobody


@pytest.mark.parametrize("warm", [False, True])
async def test_the_in_memory_matrix_follows_the_same_links_as_the_store(warm: bool) -> None:
    store = InMemoryVectorStore()
    matrices = TenantMatrices(store, KnowledgeVersions(MemoryBackend()), 1 << 24)
    knowledge = KnowledgeBase(DeterministicFakeEmbedding(size=16), store, Chunker(700, 100), matrices=matrices)
    await knowledge.ingest("films", [FILM, ACTRESS, *DISTRACTORS])
    vector = await knowledge.embed_query(QUESTION)
    if warm:
        assert await matrices.warm("films")
    from_matrix = await matrices.linked_search(
        "films", ["mara quill", "dunmore", "pellow"], vector, 5, visibility=Visibility.everything()
    )
    from_store = await store.linked_search(
        "films", ["mara quill", "dunmore", "pellow"], vector, 5, visibility=Visibility.everything()
    )
    if warm:
        assert from_matrix is not None
        assert [(p.chunk_id, round(p.score, 5)) for p in from_matrix] == [
            (p.chunk_id, round(p.score, 5)) for p in from_store
        ]
    else:
        assert from_matrix is None  # not warm: the store answers
    assert {p.doc_id for p in from_store} == {"quill"}


async def test_a_store_failing_to_follow_links_leaves_the_hybrid_search() -> None:
    class NoLinks(InMemoryVectorStore):
        async def linked_search(
            self, tenant: str, keys: Sequence[str], vector: Sequence[float], k: int, *, visibility: Visibility
        ) -> list[Passage]:
            raise ProviderError("linked search refused", provider="vector_store")

    embeddings = DeterministicFakeEmbedding(size=16)
    plain = KnowledgeBase(embeddings, InMemoryVectorStore(), Chunker(700, 100), links=False)
    failing = KnowledgeBase(embeddings, NoLinks(), Chunker(700, 100), links=True)
    for knowledge in (plain, failing):
        await knowledge.ingest("films", [FILM, ACTRESS, *DISTRACTORS])
    expected = [p.chunk_id for p in await plain.search("films", QUESTION, 8, visibility=Visibility.everything())]
    assert [
        p.chunk_id for p in await failing.search("films", QUESTION, 8, visibility=Visibility.everything())
    ] == expected
