"""The ``direct`` pipeline: the model answers alone, no retrieval.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from pipelines.direct.graph import run
from pipelines.direct.state import DirectContext

__all__ = ["DirectContext", "run"]
