from .graph import build_graph
from .state import SingleHopContext, SingleHopState

__all__ = ["SingleHopContext", "SingleHopState", "build_graph"]
