"""The gateway database's tables (SQLAlchemy Core): the curation cycle's and the assistant profiles'. Alembic's
migrations create them; this module is what queries are written against. Times are epoch seconds (floats): portable
across SQLite and PostgreSQL without time-zone surprises."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Float, Integer, MetaData, String, Table, Text, false, true

metadata = MetaData()

# Answers that need a human: abstained, answered on Incorrect/Ambiguous evidence, a draft rejected, or
# rated down. ``question`` and ``answer`` are purged after GATEWAY_CURATION_RETENTION_DAYS.
answer_records = Table(
    "curation_answer_records",
    metadata,
    Column("id", String(64), primary_key=True),  # the response id clients got
    Column("tenant", String(64), nullable=False, index=True),
    Column("trace_id", String(32), index=True),
    Column("route", String(32), nullable=False),
    Column("reasons", JSON, nullable=False),
    Column("verdicts", JSON, nullable=False),
    Column("top_k", Integer, nullable=False),
    Column("documents", JSON, nullable=False),  # [{"id", "title", "score"}] retrieved, best first
    Column("cited", JSON, nullable=False),  # ids of the documents the answer cited
    Column("answer", Text, nullable=False),
    Column("question", Text, nullable=False),
    Column("embedding", JSON, nullable=False),
    Column("expected_answer", Text),
    Column("created_at", Float, nullable=False, index=True),
    Column("resolution_id", String(64), index=True),
    # Who asked and what they could see (gateway.curation.askers): NULL on rows from before readers were known.
    Column("user_id", String(256), index=True),
    Column("visibility_key", String(16)),
    Column("visible_tags", JSON),
    Column("reader_source", String(8)),
)

feedback = Table(
    "curation_feedback",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(64), nullable=False, index=True),
    Column("response_id", String(64), index=True),
    Column("trace_id", String(32)),
    Column("rating", String(8), nullable=False),
    Column("comment", Text),
    Column("expected_answer", Text),
    Column("question", Text),
    Column("documents", JSON, nullable=False),
    Column("cited", JSON, nullable=False),
    Column("created_at", Float, nullable=False, index=True),
    # The rated answer's asker, copied from its record (NULL: rated before readers were known).
    Column("user_id", String(256), index=True),
    Column("visibility_key", String(16)),
    Column("visible_tags", JSON),
)

resolutions = Table(
    "curation_resolutions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(64), nullable=False, index=True),
    Column("gap_id", String(80), nullable=False, index=True),
    Column("document_ids", JSON, nullable=False),
    Column("rules", JSON, nullable=False),
    Column("cases", JSON, nullable=False),  # per question: both answers and both breakdowns
    Column("score_before", Float, nullable=False),
    Column("score_after", Float, nullable=False),
    Column("closed", Boolean, nullable=False),
    Column("created_at", Float, nullable=False, index=True),
)

document_changes = Table(
    "curation_document_changes",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("doc_id", String(256), primary_key=True),
    Column("changed_at", Float, nullable=False),
)

# Evaluation suites: a tenant's stored cases, and every run's state, score and per-case breakdown. A run is written
# when it starts (``running``, no score, no finish time) and rewritten when it is ``done`` or ``failed`` (``error``
# says why).
eval_cases = Table(
    "curation_eval_cases",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(64), nullable=False, index=True),
    Column("suite", String(64), nullable=False, index=True),
    Column("question", Text, nullable=False),
    Column("rules", JSON, nullable=False),
    Column("reference", Text),
    Column("created_at", Float, nullable=False),
)

eval_runs = Table(
    "curation_eval_runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(64), nullable=False, index=True),
    Column("suite", String(64), nullable=False, index=True),
    Column("trigger", String(32), nullable=False),
    Column("score", Float),
    Column("cases", JSON, nullable=False),
    Column("started_at", Float, nullable=False, index=True),
    Column("finished_at", Float),
    Column("state", String(16), nullable=False, server_default="done"),
    Column("error", Text),
    Column("run_as", JSON),  # {"user_id", "groups"} the run asked as; NULL: no user (tenant-open)
)

# A suite's settings, apart from its cases: the user its runs ask as (NULL: none). A suite without a row runs as no
# user.
eval_suites = Table(
    "curation_eval_suites",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("suite", String(64), primary_key=True),
    Column("run_as", JSON),
    Column("updated_at", Float, nullable=False),
)

# Assistant profiles, one per tenant (gateway.profiles): who answers, on which routes and models. In this
# database because it is the gateway's durable store (SQLite file or PostgreSQL) already; no retention.
assistant_profiles = Table(
    "assistant_profiles",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("name", String(64), nullable=False),
    Column("persona", Text, nullable=False),
    Column("instructions", Text, nullable=False),
    Column("answer_language", String(16), nullable=False),
    Column("allowed_routes", JSON, nullable=False),
    Column("route_models", JSON, nullable=False),
    Column("allow_system_messages", Boolean, nullable=False),
    Column("version", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# What each routed answer showed about its route afterwards (gateway.curation.routing): one row per answer the
# router decided, purged with the answer records. ``p_multi_hop`` is what a recalibration sets a threshold on, and
# ``router_version`` the router that computed it (NULL: the LLM classifier, or recorded before versions were): a
# recalibration reads the outcomes of the router in use only. ``named_documents``: the question asked about two
# documents by title (the named-documents rule's questions, weighed apart from the threshold's).
route_outcomes = Table(
    "curation_route_outcomes",
    metadata,
    Column("id", String(64), primary_key=True),  # the response id
    Column("tenant", String(64), nullable=False, index=True),
    Column("classified_route", String(32), nullable=False),
    Column("served_route", String(32), nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("p_multi_hop", Float),
    Column("disliked", Boolean, nullable=False),
    Column("created_at", Float, nullable=False, index=True),
    Column("router_version", String(64)),
    Column("named_documents", Boolean, nullable=False, server_default=false()),
)

# A tenant's routing thresholds, set by an operator's recalibration from its outcomes (never automatically), each
# for the router version it was fitted to (NULL: made before versions were recorded; applies to no router), with
# whether the named-documents rule decides for the tenant and on how many of the outcomes that was weighed.
route_calibrations = Table(
    "route_calibrations",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("multi_hop_threshold", Float, nullable=False),
    Column("outcomes", Integer, nullable=False),
    Column("accuracy_before", Float, nullable=False),
    Column("accuracy_after", Float, nullable=False),
    Column("calibrated_at", Float, nullable=False),
    Column("router_version", String(64)),
    Column("named_documents", Boolean, nullable=False, server_default=true()),
    Column("named_outcomes", Integer, nullable=False, server_default="0"),
)
