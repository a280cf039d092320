"""Training pairs for the router's and the relevance scorer's training, as JSONL rows.

One row per question: ``question``, ``positive_ids`` (documents that answer it), ``negative_ids``
(documents that were retrieved and did not), ``source`` (``resolution`` or ``feedback``), ``tenant``, and who asked
the question: ``user_id`` (null: no user named) and ``visibility`` (the ``Visibility.key()`` it was answered under;
the tenant-open key for questions asked before readers were known).
From a closed resolution: the verified documents are positive, what the first answer read is
negative. From feedback: an answer rated up makes its cited documents positive, one rated down makes
them negative. Ids are document ids (the ``id`` of ``POST /v1/documents``).

A row's ids are those its asker's visibility may read *now*, by the documents' current access (their chunks' tags,
:meth:`gateway.knowledge.KnowledgeBase.document_access`): a curator's verified document may be closed to the asker,
and a document's access may change after the answer. A pair teaches what a reader in that view should be handed, and
a document they may not read is never that. A row left with no id either way is dropped. An unrestricted asker's ids
are kept as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.curation.models import Feedback, Resolution
from pipelines.shared import TENANT_OPEN, Visibility


@dataclass(frozen=True, slots=True)
class Pair:
    """A row before its ids are checked against current access, with the visibility they are checked for."""

    row: dict[str, Any]
    visibility: Visibility

    @property
    def ids(self) -> list[str]:
        return [*self.row["positive_ids"], *self.row["negative_ids"]]


def pairs(resolutions: list[Resolution], feedback: list[Feedback], tenant_open: Visibility) -> Iterator[Pair]:
    """``tenant_open``: the visibility of a question whose asker was not recorded."""
    open_key = tenant_open.key()
    for resolution in resolutions:
        if not resolution.closed:
            continue
        positives = list(resolution.document_ids)
        for case in resolution.cases:
            retrieved = [d["id"] for d in case["before_documents"]]
            row = {
                "question": case["question"],
                "positive_ids": positives,
                "negative_ids": [d for d in dict.fromkeys(retrieved) if d not in positives],
                "source": "resolution",
                "tenant": resolution.tenant,
                "user_id": case.get("user_id"),
                "visibility": case.get("visibility") or open_key,
            }
            yield Pair(row, case_visibility(case, tenant_open))
    for item in feedback:
        if item.question is None or not item.cited:
            continue
        up = item.rating == "up"
        row = {
            "question": item.question,
            "positive_ids": list(item.cited) if up else [],
            "negative_ids": [] if up else list(item.cited),
            "source": "feedback",
            "tenant": item.tenant,
            "user_id": item.asker.user_id,
            "visibility": item.asker.key(tenant_open),
        }
        yield Pair(row, item.asker.visibility(tenant_open))


def case_visibility(case: Mapping[str, Any], tenant_open: Visibility) -> Visibility:
    """The view a resolution's case was re-run in: its recorded tags. A case stored before they were kept has its key
    alone, which reads back as everything ("all"), as tenant-open (its key), or else as the tenant-open tag only: what
    every reader of the tenant sees whatever the tenant's policy, so nothing it lets through was closed to its asker."""
    if "visible_tags" in case:
        tags = case["visible_tags"]
        return Visibility.everything() if tags is None else Visibility(frozenset(tags))
    key = case.get("visibility")
    if key == "all":
        return Visibility.everything()
    if key is None or key == tenant_open.key():
        return tenant_open
    return Visibility(frozenset({TENANT_OPEN}))


def restricted_ids(candidates: Iterable[Pair]) -> list[str]:
    """The ids whose access decides a row: those of rows of a restricted visibility."""
    return list(dict.fromkeys(d for pair in candidates if not pair.visibility.unrestricted for d in pair.ids))


def within_access(candidates: Iterable[Pair], access: Mapping[str, frozenset[str]]) -> Iterator[dict[str, Any]]:
    """Each row with only the ids its visibility allows by ``access`` (document id -> current tags; a document
    missing from it is held no more and allowed to no restricted reader); rows left with none are dropped."""
    for pair in candidates:
        positives = [d for d in pair.row["positive_ids"] if _allowed(pair.visibility, d, access)]
        negatives = [d for d in pair.row["negative_ids"] if _allowed(pair.visibility, d, access)]
        if positives or negatives:
            yield pair.row | {"positive_ids": positives, "negative_ids": negatives}


def _allowed(view: Visibility, doc_id: str, access: Mapping[str, frozenset[str]]) -> bool:
    return view.unrestricted or (doc_id in access and view.allows(access[doc_id]))


def to_jsonl(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
