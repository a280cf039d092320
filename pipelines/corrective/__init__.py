"""The ``multi_hop`` pipeline: CRAG retrieval correction and Self-RAG critique in one graph.

What other packages may use of it is named in ``__init__.pyi``; the rest is its own.
"""

import lazy_loader

# The stub declares (and types) the names; each module behind them is imported when one of its names is first
# used, so a light user of the package (the folder sync's client) never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
