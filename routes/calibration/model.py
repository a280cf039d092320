"""The calibration: every part of the service that reads a cosine (or a scorer's probability), fitted for one embedder.

Cosines are on the embedder's own scale: USE's relevant passages sit around 0.3-0.6, e5's around 0.8-0.9. A scorer
fitted on one and a threshold chosen on one judge another embedder's cosines on a scale they were never fitted for,
so they are fitted together, at set-up, for the embedder in use (:func:`routes.calibration.fit.fit_calibration`),
and kept as one artefact keyed by the embedder's fingerprint, the training data and this code's version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from pipelines.shared import JudgeModel, RelevanceModel
from routes.calibration.data import data_digest

# The fitting code's version: raise it whenever a change to the fit (features, targets, solver) can change what it
# fits, so artefacts fitted by the old code are not loaded as if fitted by the new.
FIT_VERSION = 2
KEY_CHARS = 16


@dataclass(frozen=True, slots=True)
class Calibration:
    """The fast relevance scorer, the round judge and every threshold, for one embedder (see
    :mod:`routes.calibration.fit` for what each threshold means, as an operating point on the calibration set).

    ``min_relevance`` and the two similarity thresholds are cosines; the others are on the fast scorer's probability
    (the round judge's is put on the same scale when fitted)."""

    relevance: RelevanceModel
    judge: JudgeModel
    min_relevance: float  # grounding's cosine floor for a passage to reach the generator
    escalate_below: float  # single_hop escalates when every passage scores below this
    crag_upper: float  # CRAG: a page at or above is Correct
    crag_lower: float  # CRAG: every page below is Incorrect
    explore_floor: float  # follow-up rounds grade their best page down to this
    strip_threshold: float  # knowledge refinement keeps strips scoring at least this
    semantic_threshold: float  # semantic cache: cosine of a cached question to serve its answer
    gap_similarity: float  # curation: cosine for two open questions to form one gap
    fingerprint: str  # the embedder's (``EmbeddingSettings.fingerprint``)
    key: str  # calibration_key(fingerprint): what the artefact is filed under
    # The mean of the calibration questions' unit vectors: the semantic cache's LSH hashes a question's offset from
    # it. An embedder whose questions all sit in a narrow cone (e5: two unrelated questions at cosine ~0.76) has
    # most random hyperplanes through the origin miss the cone, so every question lands in the same buckets and
    # a lookup reads the candidate cap; through the centre the planes cut the cone. Empty: hash from the origin.
    query_centre: tuple[float, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Calibration:
        relevance = RelevanceModel(**raw["relevance"])
        judge_raw = dict(raw["judge"])
        judge = JudgeModel(
            latin_intercept=float(judge_raw["latin_intercept"]),
            latin_weights=tuple(float(w) for w in judge_raw["latin_weights"]),
            cjk_intercept=float(judge_raw["cjk_intercept"]),
            cjk_weights=tuple(float(w) for w in judge_raw["cjk_weights"]),
            relevance=RelevanceModel(**judge_raw["relevance"]),
        )
        scalars = {f.name: raw[f.name] for f in fields(cls) if f.name not in ("relevance", "judge", "query_centre")}
        centre = tuple(float(x) for x in raw.get("query_centre", ()))
        return cls(relevance=relevance, judge=judge, query_centre=centre, **scalars)

    def thresholds(self) -> dict[str, float]:
        """The thresholds by name (what the fit prints beside today's values)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), float)}


def calibration_key(fingerprint: str) -> str:
    """What a calibration is filed under: the embedder's fingerprint, the calibration data's digest and the fitting
    code's version. The same key always fits the same calibration, so the answer cache's namespace may include it
    without fitting (``Settings.answer_fingerprint``)."""
    payload = json.dumps({"fingerprint": fingerprint, "data": data_digest(), "fit": FIT_VERSION})
    return hashlib.sha256(payload.encode()).hexdigest()[:KEY_CHARS]
