"""The ``single_hop`` pipeline: plain RAG, retrieve top-k then generate with citations."""
