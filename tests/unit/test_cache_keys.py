"""Query normalisation and cache keys: what counts as "the same request", and what separates tenants."""

from __future__ import annotations

import hashlib

import pytest

from gateway.cache.keys import embedding_key, exact_key, lock_key, normalize_query, version_key
from pipelines.shared.visibility import Visibility


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("  How do I   set up the VPN?  ", "how do i set up the vpn?"),
        ("ＶＰＮ　の設定は？", "vpn の設定は?"),  # full-width letters, ideographic space and question mark
        ("Straße", "strasse"),
        ("line one\n\tline\u00a0two", "line one line two"),
        ("ﬁle", "file"),  # compatibility ligature
        ("Ⅻ", "xii"),
    ],
)
def test_normalisation_folds_width_case_and_whitespace(raw: str, normalised: str) -> None:
    assert normalize_query(raw) == normalised


def test_normalisation_is_idempotent() -> None:
    once = normalize_query("  ＳＴＲＡßＥ  ｉｓ\u3000Long ")
    assert normalize_query(once) == once


def test_key_is_prefix_tenant_version_route_and_digest_of_the_normalised_query() -> None:
    key = exact_key("rag", "acme", 7, "auto", "  What is  the VPN? ", visibility="all")
    digest = hashlib.sha256(b"what is the vpn?").hexdigest()
    assert key == f"rag:q:acme:v7:auto:rall:{digest}"
    assert exact_key("rag", "acme", 7, "auto", "WHAT IS THE VPN?", visibility="all") == key


def test_every_key_part_separates_entries() -> None:
    base = exact_key("rag", "acme", 1, "auto", "q", visibility="all")
    assert exact_key("rag", "globex", 1, "auto", "q", visibility="all") != base
    assert exact_key("rag", "acme", 2, "auto", "q", visibility="all") != base
    assert exact_key("rag", "acme", 1, "multi_hop", "q", visibility="all") != base
    assert exact_key("other", "acme", 1, "auto", "q", visibility="all") != base
    assert exact_key("rag", "acme", 1, "auto", "q2", visibility="all") != base
    # What the reader may see: an answer computed from documents one may read never reaches another.
    hr, eng = Visibility.of(["hr"], unset_open=False).key(), Visibility.of(["eng"], unset_open=False).key()
    assert len({base, exact_key("rag", "acme", 1, "auto", "q", visibility=hr)}) == 2
    assert exact_key("rag", "acme", 1, "auto", "q", visibility=hr) != exact_key(
        "rag", "acme", 1, "auto", "q", visibility=eng
    )
    with pytest.raises(ValueError, match="visibility"):
        exact_key("rag", "acme", 1, "auto", "q", visibility="all:q:globex")  # no forged key segment


def test_options_that_change_the_answer_change_the_key_whatever_their_order() -> None:
    plain = exact_key("rag", "acme", 1, "auto", "q", visibility="all")
    with_k = exact_key("rag", "acme", 1, "auto", "q", {"top_k": 4, "allow_escalation": True}, visibility="all")
    assert with_k.startswith(plain + ":")
    assert exact_key("rag", "acme", 1, "auto", "q", {"allow_escalation": True, "top_k": 4}, visibility="all") == with_k
    assert exact_key("rag", "acme", 1, "auto", "q", {"top_k": 5, "allow_escalation": True}, visibility="all") != with_k
    assert exact_key("rag", "acme", 1, "auto", "q", {}, visibility="all") == plain


@pytest.mark.parametrize("tenant", ["", "../x", "a:b", "-leading", "x" * 65, "acme\n"])
def test_invalid_tenants_cannot_forge_keys(tenant: str) -> None:
    with pytest.raises(ValueError, match="invalid tenant"):
        exact_key("rag", tenant, 1, "auto", "q", visibility="all")
    with pytest.raises(ValueError, match="invalid tenant"):
        version_key("rag", tenant)


@pytest.mark.parametrize("route", ["", "auto:x", "a b", "ルート"])
def test_invalid_routes_are_refused(route: str) -> None:
    with pytest.raises(ValueError, match="invalid route"):
        exact_key("rag", "acme", 1, route, "q", visibility="all")


def test_embedding_keys_use_the_exact_text_and_the_model() -> None:
    key = embedding_key("rag", "use-multilingual-v3", "Hello")
    assert key == f"rag:emb:use-multilingual-v3:{hashlib.sha256(b'Hello').hexdigest()}"
    assert embedding_key("rag", "use-multilingual-v3", "hello") != key  # vectors are case-sensitive
    assert embedding_key("rag", "text-embedding-3-small", "Hello") != key


def test_side_keys_stay_under_the_prefix() -> None:
    assert version_key("p", "acme") == "p:ver:acme"
    assert lock_key("p:q:acme:v1:auto:abc") == "p:q:acme:v1:auto:abc:lock"
