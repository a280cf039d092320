"""The ``direct`` pipeline: the model answers alone, no retrieval."""
