"""The ``multi_hop`` pipeline: CRAG retrieval correction and Self-RAG critique in one graph."""
