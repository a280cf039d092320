from .critique import GroundednessCheck
from .graph import build_graph
from .policy import CorrectivePolicy
from .prompts import GROUNDED_SYSTEM, GROUNDED_USER
from .state import CorrectiveContext, CorrectiveState

__all__ = [
    "GROUNDED_SYSTEM",
    "GROUNDED_USER",
    "CorrectiveContext",
    "CorrectivePolicy",
    "CorrectiveState",
    "GroundednessCheck",
    "build_graph",
]
