"""Profiles on the request path: the in-process cache, one read per cold tenant, a failing store, the
model pool, and the decisions a profile makes (clamping, cache key, system messages)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import get_args

import pytest

from gateway.curation.store import CurationStore
from gateway.errors import ClientError, ProviderUnavailableError, RouteNotAllowedError
from gateway.profiles.model import AssistantProfile, RoutingCalibration, client_instructions
from gateway.profiles.schemas import Language
from gateway.profiles.service import ModelPool, Profiles
from gateway.profiles.store import ProfileStore
from gateway.providers.llm import LLMClient
from gateway.settings import AssistantSettings, LLMEndpointSettings, ModelPrice, ProfileSettings
from pipelines.shared.persona import LANGUAGES, Assistant, question_language
from tests.fakes.scripted_chat import ScriptedChatModel, replies

HOSHI = AssistantProfile(tenant="acme", name="Hoshi", persona="the HR desk")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class SlowStore(ProfileStore):
    """A store whose reads take ``delay_s`` or fail, counting them."""

    def __init__(self, profile: AssistantProfile | None, delay_s: float = 0.0) -> None:
        self.profile = profile
        self.delay_s = delay_s
        self.fail = False
        self.reads = 0

    async def get(self, tenant: str) -> AssistantProfile | None:
        self.reads += 1
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise ProviderUnavailableError("database down", provider="profile_store")
        return self.profile

    async def routing_calibration(self, tenant: str) -> RoutingCalibration | None:
        return None  # read in the same load as the profile; the calibration tests cover it


def profiles(store: ProfileStore | None, clock: Clock, **settings: float) -> Profiles:
    return Profiles(store, AssistantSettings(), ProfileSettings(**settings), clock=clock)


async def test_a_profile_is_read_once_per_ttl() -> None:
    clock, store = Clock(), SlowStore(HOSHI)
    book = profiles(store, clock, cache_ttl_s=5.0)
    assert await book.get("acme") is HOSHI
    clock.now += 4.9
    assert await book.get("acme") is HOSHI
    assert store.reads == 1
    clock.now += 0.2
    await book.get("acme")
    assert store.reads == 2


async def test_concurrent_requests_of_a_cold_tenant_share_one_read() -> None:
    store = SlowStore(HOSHI, delay_s=0.05)
    book = profiles(store, Clock())
    found = await asyncio.gather(*(book.get("acme") for _ in range(20)))
    assert all(p is HOSHI for p in found)
    assert store.reads == 1


async def test_a_failing_store_keeps_the_last_known_profile_else_the_default() -> None:
    clock, store = Clock(), SlowStore(HOSHI)
    book = profiles(store, clock, cache_ttl_s=5.0)
    await book.get("acme")
    store.fail = True
    clock.now += 6
    assert await book.get("acme") is HOSHI  # last known
    assert (await book.get("globex")).name == "Gateway Assistant"  # never known: the default
    reads = store.reads
    assert (await book.get("globex")).configured is False
    assert store.reads == reads  # the fallback is kept a TTL too: an outage costs one read per TTL


async def test_a_slow_store_is_cut_off_at_the_load_timeout() -> None:
    store = SlowStore(HOSHI, delay_s=5.0)
    book = profiles(store, Clock(), load_timeout_s=0.05)
    started = asyncio.get_running_loop().time()
    profile = await book.get("acme")
    assert asyncio.get_running_loop().time() - started < 1.0
    assert profile.configured is False


async def test_writes_through_profiles_are_seen_at_once_by_this_process(tmp_path: Path) -> None:
    curation = CurationStore.open(f"sqlite+aiosqlite:///{tmp_path}/p.db")
    await curation.migrate()
    try:
        book = profiles(ProfileStore(curation.engine), Clock(), cache_ttl_s=60.0)
        assert (await book.get("acme")).configured is False
        stored = await book.save(HOSHI)
        assert (await book.get("acme")) == stored
        assert stored.configured
        assert await book.remove("acme")
        assert (await book.get("acme")).configured is False
    finally:
        await curation.close()


def test_the_model_pool_builds_one_client_per_model_and_shares_the_breaker() -> None:
    built: list[str] = []

    def build(name: str) -> ScriptedChatModel:
        built.append(name)
        return ScriptedChatModel(responder=replies(name))

    default = LLMClient(ScriptedChatModel(responder=replies("default")), model_name="base", price=ModelPrice())
    endpoint = LLMEndpointSettings(prices={"big": ModelPrice(input=1.0, output=2.0)})
    pool = ModelPool(default, build, endpoint)
    assert pool.client("base") is default
    big = pool.client("big")
    assert pool.client("big") is big
    assert built == ["big"]
    assert big.model_name == "big"
    assert big.upstreams == default.upstreams
    assert big._upstreams[0].resilience is default._upstreams[0].resilience
    assert big._upstreams[0].price == ModelPrice(input=1.0, output=2.0)


def test_the_digest_follows_every_answer_shaping_field() -> None:
    changes = {
        "name": "Sora",
        "persona": "another desk",
        "instructions": "Be brief.",
        "answer_language": "ja",
        "allowed_routes": ("direct",),
        "route_models": {"direct": "gpt-4o-mini"},
    }
    for field, value in changes.items():
        assert dataclasses.replace(HOSHI, **{field: value}).digest != HOSHI.digest, field
    same = dataclasses.replace(HOSHI, version=7, updated_at=1.0, configured=True, allow_system_messages=True)
    assert same.digest == HOSHI.digest  # bookkeeping, and a switch that keys answers through their instructions
    assert (
        dataclasses.replace(HOSHI, allowed_routes=("multi_hop", "direct")).digest
        == dataclasses.replace(HOSHI, allowed_routes=("direct", "multi_hop")).digest
    )
    # A recalibrated threshold routes answers only under the router version it was made for: the same value for
    # another version is another routing, and keys other answers; so does turning the named-documents rule off.
    routing = RoutingCalibration(0.9, "0123456789ab")
    calibrated = dataclasses.replace(HOSHI, routing=routing)
    assert calibrated.digest != HOSHI.digest
    other_version = dataclasses.replace(routing, router_version="ba9876543210")
    assert dataclasses.replace(HOSHI, routing=other_version).digest != calibrated.digest
    rule_off = dataclasses.replace(routing, named_documents_rule=False)
    assert dataclasses.replace(HOSHI, routing=rule_off).digest not in {calibrated.digest, HOSHI.digest}


@pytest.mark.parametrize(
    ("allowed", "chosen", "runs"),
    [
        (("single_hop", "multi_hop"), "direct", "single_hop"),
        (("multi_hop",), "direct", "multi_hop"),
        (("direct", "multi_hop"), "single_hop", "multi_hop"),
        (("direct",), "single_hop", "direct"),
        (("direct", "single_hop"), "multi_hop", "single_hop"),
        (("direct",), "multi_hop", "direct"),
        (("direct", "single_hop", "multi_hop"), "multi_hop", "multi_hop"),
    ],
)
def test_clamping_prefers_more_grounding(allowed: tuple[str, ...], chosen: str, runs: str) -> None:
    profile = dataclasses.replace(HOSHI, allowed_routes=allowed)  # type: ignore[arg-type]
    assert profile.clamp(chosen) == runs  # type: ignore[arg-type]


def test_only_allowed_routes_may_be_forced() -> None:
    profile = dataclasses.replace(HOSHI, allowed_routes=("single_hop",))
    profile.check_requested("auto")
    profile.check_requested("single_hop")
    with pytest.raises(RouteNotAllowedError) as raised:
        profile.check_requested("direct")
    assert raised.value.status_code == 403
    assert raised.value.extra["code"] == "route_not_allowed"


def test_client_instructions_key_the_cache_only_when_used() -> None:
    allowing = dataclasses.replace(HOSHI, allow_system_messages=True)
    assert HOSHI.key_params("Talk like a pirate.") == {"profile": HOSHI.digest}
    pirate = allowing.key_params("Talk like a pirate.")
    assert pirate["instructions"] != allowing.key_params("Be formal.")["instructions"]
    assert "pirate" not in str(pirate)  # a digest, no text in keys
    assert allowing.key_params("") == {"profile": allowing.digest}


def test_system_messages_are_taken_or_dropped_with_a_warning() -> None:
    assert client_instructions(HOSHI, "", 100) == ("", None)
    dropped, warning = client_instructions(HOSHI, "Talk like a pirate.", 100)
    assert dropped == ""
    assert warning is not None
    assert "acme" in warning
    allowing = dataclasses.replace(HOSHI, allow_system_messages=True)
    assert client_instructions(allowing, "Talk like a pirate.", 100) == ("Talk like a pirate.", None)
    with pytest.raises(ClientError):
        client_instructions(allowing, "x" * 101, 100)
    assert HOSHI.assistant("Talk like a pirate.").client_instructions == ""  # never reaches a prompt


def test_the_answer_language_is_named_when_the_script_tells_it() -> None:
    assert question_language("あなたは誰ですか？") == "ja"
    assert question_language("東京本社") is None  # kanji alone: Japanese or Chinese
    assert question_language("누구세요?") == "ko"
    assert question_language("Who are you?") is None
    auto, fixed = Assistant(name="Hoshi"), Assistant(name="Hoshi", language="fr")
    assert auto.language_rule("あなたは誰？") == "Answer in Japanese, the language of the question."
    assert fixed.language_rule("あなたは誰？") == "Always answer in French, whatever the question's language."
    assert fixed.answer_language("Who are you?") == "fr"


def test_the_api_offers_exactly_the_languages_prompts_can_name() -> None:
    assert set(get_args(Language)) == {"auto", *LANGUAGES}
