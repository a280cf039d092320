"""Cache keys: one place decides what makes two requests "the same" and what separates tenants.

A key carries everything that may change an answer: the tenant (isolation), the tenant's knowledge
version (so nothing computed before a document change is served after it), the route the caller
asked for, the reader's visibility digest (what documents they may read: an answer computed from documents
one reader may see never reaches another who may not), and a digest of the normalised question plus any
request options that change the work.
Digests keep keys short and printable whatever the query holds (newlines, emoji, 4000 characters).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Mapping
from typing import TypeAlias

from gateway.providers import check_tenant

DEFAULT_PREFIX = "rag"

# Request options that change the computation (top_k, allow_escalation, ...): JSON scalars only,
# so their canonical form, and therefore the key, is stable across processes and versions.
KeyParams: TypeAlias = Mapping[str, str | int | float | bool | None]


def normalize_query(query: str) -> str:
    """NFKC, casefold, collapse whitespace: "ＶＰＮ  Setup?" and "vpn setup?" share one entry.

    NFKC runs on both sides of casefolding, as Unicode's NFKC_Casefold does, because folding can
    leave text that is no longer normalised; whitespace is folded last so that spaces NFKC maps
    (U+3000 ideographic space, no-break space) fold too.
    """
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", query).casefold())
    return " ".join(folded.split())


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _params_digest(params: KeyParams) -> str:
    canonical = json.dumps(dict(params), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return sha256_hex(canonical)[:16]


def exact_key(
    prefix: str,
    tenant: str,
    version: int,
    route: str,
    query: str,
    params: KeyParams | None = None,
    *,
    visibility: str,
) -> str:
    """``{prefix}:q:{tenant}:v{version}:{route}:r{visibility}:{sha256(normalised query)}[:{params digest}]``.

    ``route`` is the route the caller asked for ("auto" included), not the one that answered:
    the key must be computable before any work is done. ``visibility`` is the reader's
    ``Visibility.key()``.
    """
    return versioned(exact_key_parts(prefix, tenant, route, query, params, visibility=visibility), version)


def exact_key_parts(
    prefix: str, tenant: str, route: str, query: str, params: KeyParams | None = None, *, visibility: str
) -> tuple[str, str]:
    """``exact_key`` before and after its version: a lookup sends both, and Redis reads the version between them."""
    tail = f":{_check_route(route)}:r{_check_visibility(visibility)}:{sha256_hex(normalize_query(query))}"
    if params:
        tail += f":{_params_digest(params)}"
    return f"{prefix}:q:{check_tenant(tenant)}:v", tail


def versioned(parts: tuple[str, str], version: int) -> str:
    """The key ``exact_key_parts`` splits around its version, with ``version`` put back between (as Redis does in
    the lookup script)."""
    return f"{parts[0]}{version}{parts[1]}"


def version_key(prefix: str, tenant: str) -> str:
    return f"{prefix}:ver:{check_tenant(tenant)}"


def embedding_key(prefix: str, model: str, text: str) -> str:
    """Vectors depend on the exact text (no normalisation) and on the model that produced them."""
    return f"{prefix}:emb:{model}:{sha256_hex(text)}"


LOCK_SUFFIX = ":lock"


def lock_key(key: str) -> str:
    """The stampede lock of a cache key lives beside it, so prefix-scoped cleanup removes both."""
    return f"{key}{LOCK_SUFFIX}"


def _check_visibility(visibility: str) -> str:
    # A digest ("all", or hex): anything else would let a caller forge another reader's key segment.
    if not visibility or not visibility.isalnum() or not visibility.isascii():
        raise ValueError(f"invalid visibility key {visibility!r}")
    return visibility


def _check_route(route: str) -> str:
    # Routes are short identifiers ("auto", "single_hop"); refuse anything that could forge a
    # key segment, since keys are split on ':' when read by operators.
    if not route or not route.replace("_", "").isalnum() or not route.isascii():
        raise ValueError(f"invalid route {route!r}")
    return route
