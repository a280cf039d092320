"""Offline tools: building the router's training examples from the shared datasets, evaluating the router
(held-out split, leave-one-dataset-out) and calibrating the pipelines' relevance model.

Developers run these (``python -m routes.offline.training.evaluate`` and the others); nothing in the serving path
imports them, and unlike the serving layers (gateway → routes → pipelines) they may import any of them. What the
start-up fit of the router reads (the shipped cases in ``routes/data``) stays beside the router: ``routes.corpus``,
``routes.examples``, ``routes.written_kb``.
"""
