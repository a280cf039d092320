from .controller import CurationController, EvalSuiteController, FeedbackController, provide_curation
from .factory import CurationParts, KnowledgeChanges, open_curation_store, start_curation, start_recorder
from .pages import ReviewController
from .routing import RouteOutcome, recalibrate
from .store import CurationStore

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
