"""Every part of the service that reads a cosine, fitted at set-up for the embedder in use (:mod:`.fit`), kept as an
artefact keyed by the embedder's fingerprint, the calibration data and the fit's version (:mod:`.artefact`).

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from routes.calibration.artefact import artefact_path, load_or_fit
from routes.calibration.data import (
    DATA,
    PASSAGES_FILE,
    ROUNDS_FILE,
    SHARED_SOURCES,
    Page,
    Round,
    near_miss_rounds,
    page_key,
)
from routes.calibration.fit import (
    Embedded,
    Encoder,
    Table,
    Vectors,
    build_table,
    crag_thresholds,
    fast_scores,
    fit_judge,
    fit_judge_script,
    fit_relevance,
    judge_of,
    judge_scale,
    logit,
    out_of_sample,
    select,
    with_answerless,
)
from routes.calibration.model import FIT_VERSION, Calibration, calibration_key

__all__ = [
    "DATA",
    "FIT_VERSION",
    "PASSAGES_FILE",
    "ROUNDS_FILE",
    "SHARED_SOURCES",
    "Calibration",
    "Embedded",
    "Encoder",
    "Page",
    "Round",
    "Table",
    "Vectors",
    "artefact_path",
    "build_table",
    "calibration_key",
    "crag_thresholds",
    "fast_scores",
    "fit_judge",
    "fit_judge_script",
    "fit_relevance",
    "judge_of",
    "judge_scale",
    "load_or_fit",
    "logit",
    "near_miss_rounds",
    "out_of_sample",
    "page_key",
    "select",
    "with_answerless",
]
