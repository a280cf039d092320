"""Adapters for the outside services: LLM, embeddings, vector stores (and later web search)."""
