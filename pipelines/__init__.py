"""LangGraph pipelines behind the routes: one package per graph, shared nodes in ``shared``."""
