"""The human-in-the-loop cycle: answers that need a human, feedback, knowledge gaps, proven fixes.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.curation.controller import CurationController, EvalSuiteController, FeedbackController, provide_curation
from gateway.curation.factory import (
    CurationParts,
    KnowledgeChanges,
    open_curation_store,
    start_curation,
    start_recorder,
)
from gateway.curation.pages import ReviewController
from gateway.curation.routing import RouteOutcome, recalibrate
from gateway.curation.store import CurationStore

__all__ = [
    "CurationController",
    "CurationParts",
    "CurationStore",
    "EvalSuiteController",
    "FeedbackController",
    "KnowledgeChanges",
    "ReviewController",
    "RouteOutcome",
    "open_curation_store",
    "provide_curation",
    "recalibrate",
    "start_curation",
    "start_recorder",
]
