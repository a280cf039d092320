"""The default front router: logistic regression over the query embedding plus structure cues.

No LLM call: the query embedding is computed once per request and shared with retrieval, so
routing costs a dot product. The model is trained from the labelled examples in ``routes/data``
and saved as a small ``.npz`` keyed by the examples' digest, the feature version and the
embedder's fingerprint, so a container build (or the first start) trains it once.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from sklearn.linear_model import LogisticRegression

from routes.examples import Example, examples_digest
from routes.features import FEATURE_VERSION, NAMES, active_cues, features
from routes.types import ROUTES, Route, RouteDecision

logger = logging.getLogger(__name__)

EmbedTexts = Callable[[list[str]], np.ndarray]
FloatArray = np.ndarray[Any, np.dtype[np.float64]]
REGULARISATION_C = 4.0


@dataclass(frozen=True)
class LogisticModel:
    """Plain arrays, so the artefact is an ``.npz`` (no pickle to trust at load time)."""

    coef: FloatArray  # (classes, dims)
    intercept: FloatArray  # (classes,)
    feature_mean: FloatArray
    feature_scale: FloatArray
    classes: tuple[Route, ...]

    def design(self, vectors: np.ndarray, cue_rows: np.ndarray) -> FloatArray:
        scaled = (cue_rows - self.feature_mean) / self.feature_scale
        return np.hstack([vectors, scaled]).astype(np.float64)

    def probabilities(self, row: FloatArray) -> FloatArray:
        logits = self.coef @ row + self.intercept
        logits -= logits.max()
        exp = np.exp(logits)
        return cast(FloatArray, exp / exp.sum())

    def cue_probabilities(self, cues: Sequence[float]) -> list[float]:
        """``probabilities(design(no vector, cues))`` for one row, in plain Python: for a model over a handful of
        cue features (the knowledge router's) numpy's per-call overhead on ~10 tiny arrays was most of a routing
        decision (~0.1 ms of an ``auto`` request), for a few dozen multiply-adds."""
        coef, intercept, mean, scale = self._plain
        if len(cues) != len(mean):
            raise ValueError(f"a model over {len(mean)} cue columns and no vector columns takes {len(mean)} cues")
        scaled = [(x - m) / s for x, m, s in zip(cues, mean, scale, strict=True)]
        logits = [
            b + sum([w * x for w, x in zip(row, scaled, strict=True)]) for row, b in zip(coef, intercept, strict=True)
        ]
        top = max(logits)
        exp = [math.exp(z - top) for z in logits]
        total = sum(exp)
        return [e / total for e in exp]

    @functools.cached_property
    def _plain(self) -> tuple[list[list[float]], list[float], list[float], list[float]]:
        """The arrays as lists, once per model; a model with vector columns has no plain form."""
        if self.coef.shape[1] != len(self.feature_mean):
            raise ValueError(
                f"a model with {self.coef.shape[1] - len(self.feature_mean)} vector columns takes no cue row alone"
            )
        return self.coef.tolist(), self.intercept.tolist(), self.feature_mean.tolist(), self.feature_scale.tolist()

    def save(self, path: Path) -> None:
        """Written to a temporary file of this call's own, then renamed into place: processes started together
        on an empty cache each train and save the same artefact, and a reader sees a whole file or none. Readable
        by all (a temporary file is the owner's alone): the image builds it as root and serves as another user."""
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp.npz")
        tmp = Path(name)
        try:
            os.fchmod(handle, 0o644)
            with os.fdopen(handle, "wb") as out:
                np.savez(
                    out,
                    coef=self.coef,
                    intercept=self.intercept,
                    feature_mean=self.feature_mean,
                    feature_scale=self.feature_scale,
                    classes=np.asarray(self.classes),
                )
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> LogisticModel:
        with np.load(path, allow_pickle=False) as data:
            return cls(
                coef=data["coef"],
                intercept=data["intercept"],
                feature_mean=data["feature_mean"],
                feature_scale=data["feature_scale"],
                classes=tuple(cast(Route, str(c)) for c in data["classes"]),
            )


def fit_matrix(vectors: np.ndarray, cues: np.ndarray, routes: Sequence[Route]) -> LogisticModel:
    """Standardise the cue columns, keep the vector columns as they are, fit a balanced multinomial model."""
    mean = cues.mean(axis=0)
    scale = cues.std(axis=0)
    scale[scale < 1e-6] = 1.0
    design = np.hstack([vectors, (cues - mean) / scale])
    labels = [ROUTES.index(route) for route in routes]
    clf = LogisticRegression(C=REGULARISATION_C, class_weight="balanced", max_iter=3000)
    clf.fit(design, labels)
    classes = tuple(ROUTES[int(i)] for i in clf.classes_)
    coef, intercept = clf.coef_.astype(np.float64), clf.intercept_.astype(np.float64)
    if len(classes) == 2:  # sklearn keeps one row for two classes: softmax over (0, z) is its sigmoid
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
    return LogisticModel(
        coef=coef,
        intercept=intercept,
        feature_mean=mean.astype(np.float64),
        feature_scale=scale.astype(np.float64),
        classes=classes,
    )


def fit(examples: Sequence[Example], embed: EmbedTexts) -> LogisticModel:
    texts = [e.text for e in examples]
    return fit_matrix(embed(texts), np.vstack([features(t) for t in texts]), [e.route for e in examples])


def artefact_path(cache_dir: Path, examples: Sequence[Example], embedder: str) -> Path:
    """``embedder``: the embedder's fingerprint (``EmbeddingSettings.fingerprint``), not just its model's name."""
    digest = examples_digest(list(examples))
    safe_model = "".join(ch if ch.isalnum() else "-" for ch in embedder)
    return cache_dir / f"router-{digest}-f{FEATURE_VERSION}-{safe_model}.npz"


def cached_model(path: Path, train: Callable[[], LogisticModel], what: str) -> LogisticModel:
    """Load the artefact at ``path`` or train it and try to keep it there."""
    if path.exists():
        return LogisticModel.load(path)
    logger.info("training the router on %s (first start for this data)", what)
    model = train()
    try:
        model.save(path)
    except OSError as exc:  # a read-only filesystem still gets a working router
        logger.warning("could not cache the router model at %s: %s", path, exc)
    return model


def load_or_train(cache_dir: Path, examples: Sequence[Example], embed: EmbedTexts, embedder: str) -> LogisticModel:
    path = artefact_path(cache_dir, examples, embedder)
    return cached_model(path, lambda: fit(examples, embed), f"{len(examples)} examples")


class LogisticRouter:
    name = "logistic"

    def __init__(self, model: LogisticModel) -> None:
        self._model = model

    def classify_vector(self, query: str, vector: Sequence[float]) -> RouteDecision:
        row = self._model.design(np.asarray([vector], dtype=np.float64), features(query)[None, :])[0]
        probs = self._model.probabilities(row)
        best = int(np.argmax(probs))
        route = self._model.classes[best]
        ranked = ", ".join(f"{c}={p:.2f}" for c, p in zip(self._model.classes, probs, strict=True))
        cues = active_cues(query)
        reason = f"p({ranked})" + (f"; cues: {', '.join(cues)}" if cues else "")
        return RouteDecision(route=route, confidence=float(probs[best]), reason=reason, classifier=self.name)


__all__ = ["NAMES", "LogisticModel", "LogisticRouter", "cached_model", "fit", "fit_matrix", "load_or_train"]
