"""The ``single_hop`` pipeline: plain RAG, retrieve top-k then generate with citations.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from pipelines.single_hop.graph import build_graph
from pipelines.single_hop.state import SingleHopContext, SingleHopState

__all__ = ["SingleHopContext", "SingleHopState", "build_graph"]
