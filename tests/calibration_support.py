"""The USE calibration for tests: fitted once per machine (cached on disk, keyed like the service's artefact by the
embedder, the calibration data and the fit's version), loaded once per session.

Unit tests that build a policy by hand take the scorers and thresholds from here, as the service takes them from its
calibration: the production classes have no cosine-scale defaults.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from gateway.providers.embeddings import USEEmbeddings
from gateway.query.calibration import EmbeddingsEncoder, contrast_guard
from gateway.settings import EmbeddingSettings, cache_root
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.shared.generation import GroundingPolicy
from routes.calibration import Calibration
from routes.calibration.artefact import artefact_path, load_or_fit

# The default embedder's, whatever the environment says (``model_construct`` reads no environment).
USE_FINGERPRINT = EmbeddingSettings.model_construct().fingerprint()


def calibration_dir() -> Path:
    """Shared by every test session on this machine: the artefact's name says what it was fitted on."""
    return cache_root() / "test-calibration"


@functools.cache
def use_calibration() -> Calibration:
    """The calibration the service fits for the default embedder (USE)."""
    return load_or_fit(calibration_dir(), USE_FINGERPRINT, lambda: EmbeddingsEncoder(USEEmbeddings()), contrast_guard)[
        0
    ]


def use_calibration_file() -> Path:
    use_calibration()
    return artefact_path(calibration_dir(), USE_FINGERPRINT)


def grounding_policy(**changes: Any) -> GroundingPolicy:
    """The grounding gates as the service builds them with the USE calibration, with ``changes``."""
    calibration = use_calibration()
    return GroundingPolicy(**{"min_relevance": calibration.min_relevance, "judge": calibration.judge, **changes})


def corrective_policy(**changes: Any) -> CorrectivePolicy:
    """The bare corrective policy (CRAG's loops alone: no hops, no floor) on the USE calibration's scorer and
    thresholds, with ``changes``."""
    calibration = use_calibration()
    fitted: dict[str, Any] = {
        "upper": calibration.crag_upper,
        "lower": calibration.crag_lower,
        "explore_floor": calibration.explore_floor,
        "strip_threshold": calibration.strip_threshold,
        "relevance": calibration.relevance,
        "grounding": grounding_policy(),
    }
    return CorrectivePolicy(**{**fitted, **changes})
