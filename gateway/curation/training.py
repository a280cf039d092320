"""Training pairs for the router's and the relevance scorer's training, as JSONL rows.

One row per question: ``question``, ``positive_ids`` (documents that answer it), ``negative_ids``
(documents that were retrieved and did not), ``source`` (``resolution`` or ``feedback``), ``tenant``, and who asked
the question: ``user_id`` (null: no user named) and ``visibility`` (the ``Visibility.key()`` it was answered under;
the tenant-open key for questions asked before readers were known).
From a closed resolution: the verified documents are positive, what the first answer read is
negative. From feedback: an answer rated up makes its cited documents positive, one rated down makes
them negative. Ids are document ids (the ``id`` of ``POST /v1/documents``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gateway.curation.models import Feedback, Resolution
from pipelines.shared import Visibility


def pairs(resolutions: list[Resolution], feedback: list[Feedback], tenant_open: Visibility) -> Iterator[dict[str, Any]]:
    """``tenant_open``: the visibility of a question whose asker was not recorded."""
    open_key = tenant_open.key()
    for resolution in resolutions:
        if not resolution.closed:
            continue
        positives = list(resolution.document_ids)
        for case in resolution.cases:
            retrieved = [d["id"] for d in case["before_documents"]]
            yield {
                "question": case["question"],
                "positive_ids": positives,
                "negative_ids": [d for d in dict.fromkeys(retrieved) if d not in positives],
                "source": "resolution",
                "tenant": resolution.tenant,
                "user_id": case.get("user_id"),
                "visibility": case.get("visibility") or open_key,
            }
    for item in feedback:
        if item.question is None or not item.cited:
            continue
        up = item.rating == "up"
        yield {
            "question": item.question,
            "positive_ids": list(item.cited) if up else [],
            "negative_ids": [] if up else list(item.cited),
            "source": "feedback",
            "tenant": item.tenant,
            "user_id": item.asker.user_id,
            "visibility": item.asker.key(tenant_open),
        }


def to_jsonl(rows: Iterator[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
