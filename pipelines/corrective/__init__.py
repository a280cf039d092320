"""The ``multi_hop`` pipeline: CRAG retrieval correction and Self-RAG critique in one graph.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from pipelines.corrective.critique import GroundednessCheck
from pipelines.corrective.graph import build_graph
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.prompts import GROUNDED_SYSTEM, GROUNDED_USER
from pipelines.corrective.state import CorrectiveContext, CorrectiveState

__all__ = [
    "GROUNDED_SYSTEM",
    "GROUNDED_USER",
    "CorrectiveContext",
    "CorrectivePolicy",
    "CorrectiveState",
    "GroundednessCheck",
    "build_graph",
]
