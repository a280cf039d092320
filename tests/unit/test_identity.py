"""Who is asking (gateway.access.identity): tokens verified against a JWKS served on loopback, trusted headers,
and the one Reader every request gets. Through the real app: tests/integration/test_http_identity.py."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from litestar.datastructures import Headers
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.access.identity import (
    GROUPS_HEADER,
    TOKEN_HEADER,
    USER_HEADER,
    Identity,
    IdentityConfigError,
    Reader,
    SigningKeys,
    TokenVerifier,
    for_openai_user,
    index_keys,
    open_identity,
    record,
    user_group,
)
from gateway.access.keys import ANONYMOUS, Principal
from gateway.errors import ClientError, PermissionDeniedError, ProviderUnavailableError, UserTokenError
from gateway.knowledge.permissions import InvalidAccessError, document_tags
from gateway.settings import ApiKeyConfig, IdentitySettings
from pipelines.shared.visibility import TENANT_OPEN, UNSET, Visibility, is_group_name
from tests.fakes.identity_provider import (
    AUDIENCE,
    ISSUER,
    JwksServer,
    SigningKey,
    ec_key,
    hmac_with_public_key,
    jwks_server,
    rsa_key,
    token,
    unsigned_token,
)

CHATBOT = Principal(name="chatbot", tenant="acme", scopes=frozenset({"query"}), acts_for_users=True)
INGRESS = Principal(
    name="ingress", tenant="acme", scopes=frozenset({"query"}), acts_for_users=True, trusts_user_headers=True
)
PLAIN = Principal(name="plain", tenant="acme", scopes=frozenset({"query"}))


@pytest.fixture(scope="module")
def first() -> SigningKey:
    return rsa_key("key-1")


@pytest.fixture(scope="module")
def second() -> SigningKey:
    return rsa_key("key-2")


@pytest.fixture
def idp(first: SigningKey) -> Iterator[JwksServer]:
    with jwks_server(first) as server:
        yield server


class Clock:
    """Monotonic time the test moves: when the keys may be fetched again is decided by it, never by waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Verifying:
    identity: Identity
    clock: Clock
    server: JwksServer


def settings_for(server: JwksServer, **changes: Any) -> IdentitySettings:
    return IdentitySettings(issuer=ISSUER, audience=AUDIENCE, jwks_url=server.url, **changes)


@pytest.fixture
async def verifying(idp: JwksServer) -> AsyncIterator[Verifying]:
    clock = Clock()
    settings = settings_for(idp)
    async with httpx.AsyncClient() as http:
        keys = SigningKeys(http, settings, clock=clock)
        yield Verifying(Identity(settings, TokenVerifier(settings, keys)), clock, idp)


def sent(**headers: str) -> Headers:
    return Headers({name: value for name, value in headers.items()})


def with_token(value: str) -> Headers:
    return Headers({TOKEN_HEADER: value})


async def refused(identity: Identity, value: str, match: str, principal: Principal = CHATBOT) -> None:
    with pytest.raises(UserTokenError, match=match) as caught:
        await identity.reader(principal, with_token(value))
    assert caught.value.status_code == 401
    assert caught.value.extra["code"] == "invalid_user_token"


async def test_a_valid_token_is_a_reader_with_its_groups(verifying: Verifying, first: SigningKey) -> None:
    reader = await verifying.identity.reader(CHATBOT, with_token(token(first)))
    assert reader == Reader(
        "alice", frozenset({"finance", "staff"}), Visibility.of({"finance", "staff"}, unset_open=True), "token"
    )
    assert reader.visibility.groups == frozenset({"finance", "staff", TENANT_OPEN, UNSET})
    again = await verifying.identity.reader(CHATBOT, with_token(token(first, subject="bob", groups=["staff"])))
    assert (again.user_id, again.groups) == ("bob", frozenset({"staff"}))
    assert verifying.server.fetched() == 1  # the keys were fetched once and kept
    prefixed = await verifying.identity.reader(CHATBOT, with_token(f"Bearer {token(first)}"))
    assert prefixed.user_id == "alice"  # as Authorization carries a token


async def test_an_ec_key_without_alg_signs_es256(idp: JwksServer) -> None:
    key = ec_key("ec-1")
    idp.publish(key, with_alg=False)
    settings = settings_for(idp)
    async with httpx.AsyncClient() as http:
        identity = Identity(settings, TokenVerifier(settings, SigningKeys(http, settings)))
        reader = await identity.reader(CHATBOT, with_token(token(key)))
    assert reader.user_id == "alice"


async def test_expired_wrong_audience_and_wrong_issuer_are_refused(verifying: Verifying, first: SigningKey) -> None:
    identity = verifying.identity
    past = int(verifying.clock.now)  # any past instant will do: exp is wall-clock time
    await refused(identity, token(first, exp=1_000_000, iat=past - 10, nbf=past - 10), "expired")
    await refused(identity, token(first, aud="another-service"), "not for this gateway")
    await refused(identity, token(first, iss="https://evil.example.test/"), "not issued by")
    await refused(identity, token(first, exp=None), "'exp' claim")
    await refused(identity, token(first, sub=None), "'sub' claim")


async def test_a_token_from_the_future_is_refused_beyond_the_leeway(verifying: Verifying, first: SigningKey) -> None:
    now = int(time.time())
    await refused(verifying.identity, token(first, nbf=now + 600, iat=now), "not valid yet")
    within = await verifying.identity.reader(CHATBOT, with_token(token(first, nbf=now + 5, iat=now + 5)))
    assert within.user_id == "alice"  # 5 s of clock skew is inside the 30 s leeway


async def test_a_tampered_token_is_refused(verifying: Verifying, first: SigningKey, second: SigningKey) -> None:
    header, body, _ = token(first).split(".")
    _, _, other_signature = token(first, subject="mallory").split(".")
    await refused(verifying.identity, f"{header}.{body}.{other_signature}", "signature does not verify")
    # Signed by a key of the right kind under the published key's id: not the provider's key.
    impostor = SigningKey(first.kid, "RS256", second.private)
    await refused(verifying.identity, token(impostor), "signature does not verify")
    await refused(verifying.identity, "not-a-jwt", "not a signed JWT")


async def test_alg_none_is_refused_without_fetching_keys(verifying: Verifying, first: SigningKey) -> None:
    await refused(verifying.identity, unsigned_token(first.kid), "algorithm 'none' is not accepted")
    assert verifying.server.fetched() == 0


async def test_hs256_signed_with_the_public_key_is_refused(verifying: Verifying, first: SigningKey) -> None:
    """Algorithm confusion: the public key as an HMAC secret. Refused by the allow-list (asymmetric only) and, were
    HS256 ever listed, by each published key being bound to its own algorithm."""
    await refused(verifying.identity, hmac_with_public_key(first), "algorithm 'HS256' is not accepted")
    assert verifying.server.fetched() == 0
    published = index_keys({"keys": [first.jwk(with_alg=False)]}, ["RS256", "HS256"])
    assert set(published) == {(first.kid, "RS256")}  # an RSA key never becomes an HMAC secret


async def test_no_groups_claim_reads_what_is_open_to_the_tenant(verifying: Verifying, first: SigningKey) -> None:
    reader = await verifying.identity.reader(CHATBOT, with_token(token(first, groups=None)))
    assert (reader.user_id, reader.groups, reader.source) == ("alice", frozenset(), "token")
    assert reader.visibility == Visibility.tenant_only(unset_open=True)
    one = await verifying.identity.reader(CHATBOT, with_token(token(first, groups="finance")))
    assert one.groups == {"finance"}
    reserved = await verifying.identity.reader(CHATBOT, with_token(token(first, groups=["*", "~", "staff"])))
    assert reserved.groups == {"staff"}  # the reserved tags cannot be claimed
    # Nor groups no document's access could name: they would grant nothing.
    unnamed = await verifying.identity.reader(CHATBOT, with_token(token(first, groups=["Team A", "eng!", "staff"])))
    assert unnamed.groups == {"staff"}
    await refused(verifying.identity, token(first, groups=[{"name": "staff"}]), "list of group names")


async def test_rotated_keys_are_fetched_and_the_removed_one_refused(
    verifying: Verifying, first: SigningKey, second: SigningKey
) -> None:
    identity, clock, server = verifying.identity, verifying.clock, verifying.server
    assert (await identity.reader(CHATBOT, with_token(token(first)))).user_id == "alice"
    server.publish(second)  # the provider rotates: the first key is gone, the second one new
    clock.now += 31  # past the 30 s between fetches
    reader = await identity.reader(CHATBOT, with_token(token(second, subject="bob")))
    assert reader.user_id == "bob"
    assert server.fetched() == 2  # the unknown key id fetched the keys again
    await refused(identity, token(first), "does not publish")
    assert server.fetched() == 2  # and the removed key, unknown now, did not fetch again so soon


async def test_made_up_key_ids_fetch_at_most_once_per_interval(verifying: Verifying, first: SigningKey) -> None:
    identity, clock, server = verifying.identity, verifying.clock, verifying.server
    await identity.reader(CHATBOT, with_token(token(first)))
    clock.now += 31
    forged = [SigningKey(f"made-up-{uuid.uuid4().hex}", "RS256", first.private) for _ in range(40)]
    outcomes = await asyncio.gather(
        *(identity.reader(CHATBOT, with_token(token(key))) for key in forged), return_exceptions=True
    )
    assert all(isinstance(outcome, UserTokenError) for outcome in outcomes)
    assert server.fetched() == 2  # forty unknown key ids at once: one fetch
    await refused(identity, token(forged[0]), "does not publish")
    assert server.fetched() == 2
    clock.now += 31
    await refused(identity, token(forged[0]), "does not publish")
    assert server.fetched() == 3


async def test_keys_are_kept_through_a_provider_outage(verifying: Verifying, first: SigningKey) -> None:
    identity, clock, server = verifying.identity, verifying.clock, verifying.server
    await identity.reader(CHATBOT, with_token(token(first)))
    server.status = 503
    clock.now += 601  # the keys are stale: fetched again, which fails
    assert (await identity.reader(CHATBOT, with_token(token(first)))).user_id == "alice"
    assert server.fetched() == 2


async def test_no_keys_ever_fetched_is_a_503(idp: JwksServer, first: SigningKey) -> None:
    idp.status = 500
    settings = settings_for(idp)
    async with httpx.AsyncClient() as http:
        identity = Identity(settings, TokenVerifier(settings, SigningKeys(http, settings, clock=Clock())))
        with pytest.raises(ProviderUnavailableError) as caught:
            await identity.reader(CHATBOT, with_token(token(first)))
    assert caught.value.status_code == 503
    assert caught.value.provider == "identity_provider"


async def test_closed_unset_documents_leave_them_out(idp: JwksServer, first: SigningKey) -> None:
    settings = settings_for(idp, unset_documents="closed")
    async with httpx.AsyncClient() as http:
        identity = Identity(settings, TokenVerifier(settings, SigningKeys(http, settings)))
        reader = await identity.reader(CHATBOT, with_token(token(first)))
    assert reader.visibility == Visibility.of({"finance", "staff"}, unset_open=False)
    assert identity.nobody.visibility == Visibility.tenant_only(unset_open=False)
    assert UNSET not in (identity.nobody.visibility.groups or ())


async def test_a_token_from_a_key_not_acting_for_users_is_403(verifying: Verifying, first: SigningKey) -> None:
    with pytest.raises(PermissionDeniedError) as caught:
        await verifying.identity.reader(PLAIN, with_token(token(first)))
    assert caught.value.extra["code"] == "key_does_not_act_for_users"
    assert verifying.server.fetched() == 0


async def test_no_user_reads_what_is_open_to_the_tenant(verifying: Verifying) -> None:
    for principal in (PLAIN, CHATBOT, INGRESS, ANONYMOUS):
        reader = await verifying.identity.reader(principal, sent())
        assert reader == Reader(None, frozenset(), Visibility.tenant_only(unset_open=True), "none")


async def test_trusted_headers_name_the_user_and_groups(verifying: Verifying) -> None:
    reader = await verifying.identity.reader(INGRESS, sent(**{USER_HEADER: " carol ", GROUPS_HEADER: "hr, staff,,"}))
    assert reader == Reader(
        "carol", frozenset({"hr", "staff"}), Visibility.of({"hr", "staff"}, unset_open=True), "header"
    )
    alone = await verifying.identity.reader(INGRESS, sent(**{USER_HEADER: "dave"}))
    assert (alone.groups, alone.visibility) == (frozenset(), Visibility.tenant_only(unset_open=True))


@pytest.mark.parametrize("principal", [PLAIN, CHATBOT])
@pytest.mark.parametrize("header", [USER_HEADER, GROUPS_HEADER])
async def test_user_headers_from_an_untrusted_key_are_403(
    verifying: Verifying, principal: Principal, header: str
) -> None:
    with pytest.raises(PermissionDeniedError) as caught:
        await verifying.identity.reader(principal, sent(**{header: "finance"}))
    assert caught.value.extra["code"] == "user_headers_not_trusted"


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({GROUPS_HEADER: "finance"}, "no_user"),
        ({USER_HEADER: ""}, "bad_user"),
        ({USER_HEADER: "x" * 257}, "bad_user"),
        ({USER_HEADER: "carol", GROUPS_HEADER: "staff,*"}, "bad_groups"),
        ({USER_HEADER: "carol", GROUPS_HEADER: "~unset"}, "bad_groups"),
        ({USER_HEADER: "carol", GROUPS_HEADER: "staff,team@corp"}, "bad_groups"),
        ({USER_HEADER: "carol", GROUPS_HEADER: "g" * 65}, "bad_groups"),
        ({USER_HEADER: "carol", TOKEN_HEADER: "a.b.c"}, "user_named_twice"),
    ],
)
async def test_bad_user_headers_are_400(verifying: Verifying, headers: dict[str, str], code: str) -> None:
    with pytest.raises(ClientError) as caught:
        await verifying.identity.reader(INGRESS, sent(**headers))
    assert caught.value.status_code == 400
    assert caught.value.extra["code"] == code


async def test_a_repeated_user_header_is_400(verifying: Verifying) -> None:
    headers = Headers([(USER_HEADER.encode(), b"carol"), (USER_HEADER.encode(), b"admin")])
    with pytest.raises(ClientError, match="sent 2 times"):
        await verifying.identity.reader(INGRESS, headers)


async def test_tokens_without_an_identity_provider_are_401() -> None:
    async with httpx.AsyncClient() as http:
        identity = open_identity(IdentitySettings(), http, [])
        assert not identity.verifies_tokens
        with pytest.raises(UserTokenError, match="no identity provider"):
            await identity.reader(CHATBOT, with_token("a.b.c"))


async def test_a_half_configured_provider_stops_the_start_up() -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(IdentityConfigError, match="all of"):
            open_identity(IdentitySettings(issuer=ISSUER, audience=AUDIENCE), http, [])
        with pytest.raises(IdentityConfigError, match="http"):
            open_identity(IdentitySettings(issuer=ISSUER, audience=AUDIENCE, jwks_url="file:///etc/jwks"), http, [])


def test_header_trust_needs_acting_for_users() -> None:
    with pytest.raises(ValueError, match="trusts_user_headers needs acts_for_users"):
        ApiKeyConfig(name="k", key_sha256="ab" * 32, tenant="acme", trusts_user_headers=True)


async def test_the_openai_user_field(verifying: Verifying, first: SigningKey) -> None:
    by_token = await verifying.identity.reader(CHATBOT, with_token(token(first)))
    assert for_openai_user(by_token, "alice", CHATBOT) is by_token
    assert for_openai_user(by_token, None, CHATBOT) is by_token
    with pytest.raises(PermissionDeniedError) as caught:
        for_openai_user(by_token, "bob", CHATBOT)  # the token's subject wins
    assert caught.value.extra == {"field": "user", "code": "user_mismatch"}
    by_header = await verifying.identity.reader(INGRESS, sent(**{USER_HEADER: "carol", GROUPS_HEADER: "hr"}))
    with pytest.raises(PermissionDeniedError):
        for_openai_user(by_header, "dave", INGRESS)
    nobody = verifying.identity.nobody
    named = for_openai_user(nobody, "erin", INGRESS)  # a key trusting user headers may name the user here
    assert named == Reader("erin", frozenset(), nobody.visibility, "header")
    assert for_openai_user(nobody, "erin", CHATBOT) is nobody  # any other key: an opaque label, it names nobody


def test_the_reader_goes_on_the_request_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = Reader("alice", frozenset({"finance"}), Visibility.of({"finance"}, unset_open=True), "token")
    with provider.get_tracer("test").start_as_current_span("POST /v1/query"):
        record(reader)
    with provider.get_tracer("test").start_as_current_span("POST /v1/query"):
        record(Reader(None, frozenset(), Visibility.tenant_only(unset_open=True), "none"))
    named, anonymous = (dict(span.attributes or {}) for span in exporter.get_finished_spans())
    assert named == {
        "enduser.id": "alice",
        "gateway.reader.source": "token",
        "gateway.reader.visibility": reader.visibility.key(),
    }
    assert "finance" not in str(named)  # the groups themselves stay out of traces
    assert anonymous == {
        "gateway.reader.source": "none",
        "gateway.reader.visibility": Visibility.tenant_only(unset_open=True).key(),
    }


@pytest.mark.parametrize(
    "name", ["hr", "eng/platform", "team:sre", "a.b-c_d", "g" * 64, "*", "~", "~x", "Team A", "/eng", "", "g" * 65]
)
def test_a_reader_may_be_in_exactly_the_groups_a_document_can_name(name: str) -> None:
    """One rule for both sides: a user's group that no document's access could name would grant nothing, and a
    document's group no user could be in would be readable by nobody but an admin."""
    try:
        document_tags([name])
        nameable = True
    except InvalidAccessError:
        nameable = False
    assert is_group_name(name) is nameable
    # A reader's visibility gains the group exactly when a document could name it.
    assert (Visibility.of([name], unset_open=False) != Visibility.tenant_only(unset_open=False)) is nameable


# --- the keys at start-up and in readiness ----------------------------------------------------------------


class Transitions:
    """What the keys report of the provider going down or coming back (the app's telemetry counts it)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def dependency_changed(self, name: str, up: bool) -> None:
        self.seen.append((name, up))


def probed_keys(
    server: JwksServer, http: httpx.AsyncClient, clock: Clock, events: Transitions | None = None
) -> SigningKeys:
    return SigningKeys(http, settings_for(server), clock=clock, events=events or Transitions())


async def probe(keys: SigningKeys) -> str:
    """One readiness check's outcome: ``ok``, or the detail it fails with."""
    try:
        await keys.check()
    except ProviderUnavailableError as exc:
        failure = exc
    else:
        return "ok"
    assert failure.provider == "identity_provider"
    return failure.detail


def host_of(server: JwksServer) -> str:
    return server.url.split("/")[2]  # 127.0.0.1:<port>


async def test_prefetch_fetches_the_keys_once_before_any_token(idp: JwksServer, first: SigningKey) -> None:
    settings = settings_for(idp)
    async with httpx.AsyncClient() as http:
        identity = open_identity(settings, http, [])
        keys = identity.signing_keys
        assert keys is not None
        await identity.prefetch_keys()
        assert idp.fetched() == 1
        await identity.prefetch_keys()  # fresh keys: nothing to fetch
        reader = await identity.reader(CHATBOT, with_token(token(first)))
        assert await probe(keys) == "ok"
    assert reader.user_id == "alice"
    assert idp.fetched() == 1  # the token and the probe read the keys fetched at start-up


async def test_a_failed_prefetch_is_logged_and_the_start_goes_on(
    idp: JwksServer, first: SigningKey, caplog: pytest.LogCaptureFixture
) -> None:
    idp.status = 503
    clock = Clock()
    async with httpx.AsyncClient() as http:
        keys = probed_keys(idp, http, clock)
        identity = Identity(settings_for(idp), TokenVerifier(settings_for(idp), keys))
        with caplog.at_level(logging.WARNING, logger="gateway.access.identity"):
            await identity.prefetch_keys()  # no exception: requests naming no user need no keys
        with pytest.raises(ProviderUnavailableError, match="answered 503") as caught:
            await identity.reader(CHATBOT, with_token(token(first)))
        assert caught.value.status_code == 503
        assert idp.fetched() == 1  # the token came within the interval: no second fetch so soon
        idp.status = 200
        clock.now += 31
        assert (await identity.reader(CHATBOT, with_token(token(first)))).user_id == "alice"  # fetched again
    assert idp.fetched() == 2
    (logged,) = [r for r in caplog.records if r.name == "gateway.access.identity" and r.levelno >= logging.WARNING]
    assert host_of(idp) in logged.getMessage()
    assert "answered 503" in logged.getMessage()


async def test_probes_never_fetch_more_often_than_the_interval(idp: JwksServer) -> None:
    clock = Clock()
    async with httpx.AsyncClient() as http:
        keys = probed_keys(idp, http, clock)
        await keys.prefetch()
        assert [await probe(keys) for _ in range(5)] == ["ok"] * 5
        assert idp.fetched() == 1  # fresh keys: probes fetch nothing

        clock.now += 601  # old: the next probe fetches them again, once
        assert [await probe(keys) for _ in range(3)] == ["ok"] * 3
        assert idp.fetched() == 2

        idp.status = 503  # the provider goes down and the keys grow old
        clock.now += 601
        outcomes = [await probe(keys) for _ in range(5)]
        assert idp.fetched() == 3  # one fetch, not five
        assert len(set(outcomes)) == 1
        assert outcomes[0].startswith(f"Signing keys from {host_of(idp)} are 601 s old (kept for 600 s)")
        assert outcomes[0].endswith("The identity provider's JWKS answered 503.")

        clock.now += 29
        await probe(keys)
        assert idp.fetched() == 3  # within the interval still
        clock.now += 2
        await probe(keys)
        assert idp.fetched() == 4

        idp.status = 200
        clock.now += 30
        assert await probe(keys) == "ok"  # back without a user's request
        assert idp.fetched() == 5


async def test_no_keys_at_all_is_reported_with_the_host_and_the_error(idp: JwksServer, first: SigningKey) -> None:
    idp.status = 500
    clock = Clock()
    events = Transitions()
    async with httpx.AsyncClient() as http:
        keys = probed_keys(idp, http, clock, events)
        await keys.prefetch()
        outcomes = {await probe(keys) for _ in range(5)}
        assert outcomes == {f"No signing keys from {host_of(idp)}: The identity provider's JWKS answered 500."}
        assert idp.fetched() == 1
        idp.publish()  # up again, but publishing no usable key
        idp.status = 200
        clock.now += 30
        assert "has no signing key for RS256, ES256" in await probe(keys)
        idp.publish(first)
        clock.now += 30
        assert await probe(keys) == "ok"
        assert (await keys.key(first.kid, "RS256")).key_id == first.kid
    assert idp.fetched() == 3
    # Down once (two failures), up once: a transition each, whoever fetched.
    assert events.seen == [("identity_provider", False), ("identity_provider", True)]


async def test_a_probe_timing_out_does_not_cancel_the_fetch(idp: JwksServer, first: SigningKey) -> None:
    """The readiness timeout ends the probe's wait, not the fetch: a token arriving meanwhile reads its keys, and
    the provider is not asked twice."""
    idp.hold = threading.Event()
    try:
        async with httpx.AsyncClient() as http:
            keys = probed_keys(idp, http, Clock())
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(keys.check(), timeout=0.05)
            idp.hold.set()
            found = await keys.key(first.kid, "RS256")  # waits for the probe's fetch, then reads its keys
            assert await probe(keys) == "ok"
    finally:
        idp.hold.set()
    assert found.key_id == first.kid
    assert idp.fetched() == 1


async def test_a_probe_during_a_fetch_a_token_started_reports_its_outcome(idp: JwksServer, first: SigningKey) -> None:
    """Keys not fetched yet and a token's fetch under way: the probe waits for that fetch instead of reporting the
    provider down because it may not fetch again so soon."""
    idp.hold = threading.Event()
    try:
        async with httpx.AsyncClient() as http:
            keys = probed_keys(idp, http, Clock())
            token = asyncio.ensure_future(keys.key(first.kid, "RS256"))
            await asyncio.sleep(0)  # the token's lookup runs to its fetch's first wait, holding the fetch
            checked = asyncio.ensure_future(probe(keys))
            await asyncio.sleep(0)
            assert not checked.done()
            idp.hold.set()
            assert await checked == "ok"
            assert (await token).key_id == first.kid
    finally:
        idp.hold.set()
    assert idp.fetched() == 1


async def test_the_readiness_detail_names_the_host_not_credentials_or_path() -> None:
    url = "http://svc:hunter2@127.0.0.1:1/realms/acme/protocol/openid-connect/certs"  # nothing listens on port 1
    settings = IdentitySettings(issuer=ISSUER, audience=AUDIENCE, jwks_url=url)
    async with httpx.AsyncClient() as http:
        keys = SigningKeys(http, settings, clock=Clock())
        await keys.prefetch()
        detail = await probe(keys)
    assert (
        detail == "No signing keys from 127.0.0.1:1: The identity provider's JWKS could not be reached (ConnectError)."
    )


# --- Keycloak's group paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "group"),
    [
        ("eng", "eng"),
        ("/eng", "eng"),
        ("/eng/platform", "eng/platform"),
        ("eng/platform", "eng/platform"),
        ("/" + "g" * 64, "g" * 64),
        ("//eng", None),  # one leading "/" is a path's root; two are no group path
        ("/*", None),  # a reserved tag stays reserved after the "/"
        ("/~", None),
        ("/~x", None),
        ("*", None),
        ("/", None),
        ("", None),
        ("/Team A", None),
        ("/" + "g" * 65, None),
    ],
)
def test_a_users_group_path_reads_as_the_group_documents_name(raw: str, group: str | None) -> None:
    assert user_group(raw) == group
    if group is not None:  # what it reads as is what a document's access can name
        assert document_tags([group]) == (group,)


async def test_a_tokens_keycloak_group_paths_are_its_groups(verifying: Verifying, first: SigningKey) -> None:
    paths = ["/eng", "/eng/platform", "staff", "//hr", "/*", "/~", "/"]
    reader = await verifying.identity.reader(CHATBOT, with_token(token(first, groups=paths)))
    assert reader.groups == {"eng", "eng/platform", "staff"}  # the rest dropped, as names no document could name
    assert reader.visibility == Visibility.of({"eng", "eng/platform", "staff"}, unset_open=True)
    assert TENANT_OPEN in (reader.visibility.groups or ())  # "/*" granted nothing beyond what everyone has
    one = await verifying.identity.reader(CHATBOT, with_token(token(first, groups="/eng/platform")))
    assert one.groups == {"eng/platform"}


async def test_trusted_header_group_paths_are_its_groups(verifying: Verifying) -> None:
    headers = sent(**{USER_HEADER: "carol", GROUPS_HEADER: "/hr, /eng/platform ,staff,eng/platform"})
    reader = await verifying.identity.reader(INGRESS, headers)
    assert reader.groups == {"hr", "eng/platform", "staff"}
    assert reader.visibility == Visibility.of({"hr", "eng/platform", "staff"}, unset_open=True)


@pytest.mark.parametrize("groups", ["//hr", "staff,/*", "/~", "/~unset", "/", "/Team A"])
async def test_trusted_header_paths_that_name_no_group_are_400(verifying: Verifying, groups: str) -> None:
    with pytest.raises(ClientError, match="is not a group name") as caught:
        await verifying.identity.reader(INGRESS, sent(**{USER_HEADER: "carol", GROUPS_HEADER: groups}))
    assert caught.value.status_code == 400
    assert caught.value.extra["code"] == "bad_groups"
