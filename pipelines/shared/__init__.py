"""Types and nodes every pipeline uses.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from pipelines.shared.citations import CITATION_MARKER, cited_passages, drop_phantom_citations
from pipelines.shared.deps import (
    ChatClient,
    ChatReply,
    Embedder,
    LLMCall,
    Passage,
    Retriever,
    SchemaT,
    StructuredOutputError,
    TextSink,
    WebSearch,
)
from pipelines.shared.events import (
    AnswerText,
    Assess,
    Check,
    CheckOutcome,
    Escalate,
    Evaluate,
    Event,
    Generate,
    PipelineEvent,
    PlanHop,
    Refine,
    Retrieve,
    Rewrite,
    SearchHop,
    SearchMore,
    Stop,
    StopReason,
    Withhold,
)
from pipelines.shared.followup import FollowupRewrite, Turn, rewrite_followup
from pipelines.shared.fusion import reciprocal_rank_fusion
from pipelines.shared.generation import (
    Draft,
    GroundingPolicy,
    draft_answer,
    format_context,
    generate_grounded,
    grounded_messages,
    relevant,
)
from pipelines.shared.judge import CJK_FEATURES, FEATURES, JudgeModel, judge_round, round_features
from pipelines.shared.links import about_keys, mention_keys
from pipelines.shared.persona import DEFAULT_ASSISTANT, LANGUAGES, Assistant, compose, question_language
from pipelines.shared.prompts import (
    ABSTAIN_EN,
    ABSTAIN_JA,
    GROUNDED_SYSTEM,
    GROUNDED_USER,
    NOT_IN_CONTEXT,
    QUOTED_DATA_RULE,
)
from pipelines.shared.relevance import QueryScorer, RelevanceModel, Verdict, fast_verdict, overlap
from pipelines.shared.sentence_gate import Judged, RoundCheck, SentenceGate, joined
from pipelines.shared.sentences import split_sentences
from pipelines.shared.state import PipelineState, Update, advanced
from pipelines.shared.strips import split_strips
from pipelines.shared.support import STOPWORDS, lexical_support, mostly_cjk, terms
from pipelines.shared.telemetry import NO_TELEMETRY, PipelineTelemetry, instrument
from pipelines.shared.text import EN_STOPWORDS, content_terms, content_words, has_cjk, normalise, same_script, tokens
from pipelines.shared.visibility import MAX_GROUP_CHARS, TENANT_OPEN, UNSET, Visibility, is_group_name

__all__ = [
    "ABSTAIN_EN",
    "ABSTAIN_JA",
    "CITATION_MARKER",
    "CJK_FEATURES",
    "DEFAULT_ASSISTANT",
    "EN_STOPWORDS",
    "FEATURES",
    "GROUNDED_SYSTEM",
    "GROUNDED_USER",
    "LANGUAGES",
    "MAX_GROUP_CHARS",
    "NOT_IN_CONTEXT",
    "NO_TELEMETRY",
    "QUOTED_DATA_RULE",
    "STOPWORDS",
    "TENANT_OPEN",
    "UNSET",
    "AnswerText",
    "Assess",
    "Assistant",
    "ChatClient",
    "ChatReply",
    "Check",
    "CheckOutcome",
    "Draft",
    "Embedder",
    "Escalate",
    "Evaluate",
    "Event",
    "FollowupRewrite",
    "Generate",
    "GroundingPolicy",
    "JudgeModel",
    "Judged",
    "LLMCall",
    "Passage",
    "PipelineEvent",
    "PipelineState",
    "PipelineTelemetry",
    "PlanHop",
    "QueryScorer",
    "Refine",
    "RelevanceModel",
    "Retrieve",
    "Retriever",
    "Rewrite",
    "RoundCheck",
    "SchemaT",
    "SearchHop",
    "SearchMore",
    "SentenceGate",
    "Stop",
    "StopReason",
    "StructuredOutputError",
    "TextSink",
    "Turn",
    "Update",
    "Verdict",
    "Visibility",
    "WebSearch",
    "Withhold",
    "about_keys",
    "advanced",
    "cited_passages",
    "compose",
    "content_terms",
    "content_words",
    "draft_answer",
    "drop_phantom_citations",
    "fast_verdict",
    "format_context",
    "generate_grounded",
    "grounded_messages",
    "has_cjk",
    "instrument",
    "is_group_name",
    "joined",
    "judge_round",
    "lexical_support",
    "mention_keys",
    "mostly_cjk",
    "normalise",
    "overlap",
    "question_language",
    "reciprocal_rank_fusion",
    "relevant",
    "rewrite_followup",
    "round_features",
    "same_script",
    "split_sentences",
    "split_strips",
    "terms",
    "tokens",
]
