from .graph import run
from .state import DirectContext

__all__ = ["DirectContext", "run"]
