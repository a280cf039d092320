"""The default front router: decides from what the tenant's knowledge base says about the question.

Two small logistic regressions over the probe's signals (:mod:`routes.probe`), never over the query
embedding: leave-one-dataset-out showed that a model over the embedding, or over the question's
length and phrasing, learns each training set's topics and style, which is what made the earlier
router fail on sets it never saw. Stage 1 decides *whether* to retrieve (is anything in the store
about this question; is it conversation, a transform, code or arithmetic), stage 2 *how* (does one
document hold the question, or does a second document hold a part the first lacks). A tenant with
nothing in its store routes ``direct`` without asking either model: there is nothing to retrieve.

They are trained on :mod:`routes.corpus`'s labelled cases, each probed against its own tenant, and
cached as ``.npz`` files keyed by a digest of the cases and passages, the feature and signal
versions, the embedder's fingerprint and the chunking, so a container build (or the first start) trains
them once (about 20 s with the default embeddings: some 2,500 questions and 1,100 passages).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from routes.corpus import PASSAGES_FILE, REDUNDANT_FILES, Case, CorpusTenant, EmbedTexts, all_cases, load_tenants
from routes.features import FEATURE_VERSION, active_cues
from routes.logistic_router import LogisticModel, cached_model, fit_matrix
from routes.probe import PROBE_DEPTH, Probe, ProbeSignals, read_signals, stemmer_version
from routes.types import Route, RouteDecision
from routes.written_kb import KB_FILE

SIGNAL_VERSION = 7
# Stage 1, retrieve or not: is anything in the store about this question, and is it a request that
# needs no documents at all (conversation, transforms, code, arithmetic)? What the top documents hold
# *together* answers that; whether one document holds it all is stage 2's question (with the best
# document's coverage here too, leave-one-dataset-out sent more paraphrased SQuAD and written-KB
# questions to ``direct``).
RETRIEVE_SIGNALS = ("top_score", "margin", "union_coverage", "entity_union_coverage")
DIRECT_CUES = ("greeting", "transform", "about_assistant", "code", "arithmetic")
# Stage 2, one document or several: does a second document hold a part of the question the best one
# lacks, other than by retelling the same facts (see ``routes.probe``: shared figures)? Leave-one-dataset-out kept
# this one signal: adding the spread's other measures (coverage gain, covering documents), the comparison / both
# cues, or measures of how alike the top documents are (shared names or words, their vectors' cosine) won on some
# held-out sets and lost more on others, i.e. they carried dataset style. Without the repetition discount, the
# written redundant sets (each fact told by 2-4 documents) went 62-73% to ``multi_hop``.
SPREAD_SIGNALS = ("distinct_second_share",)
# A question asking about this many of the probe's documents together, by their titles ("X or Y", 「X」と「Y」), asks
# about each of them: multi_hop whatever the coverage reads. Over the router's training cases 35 of 189 multi-hop
# questions did so, and none of 410 single-hop (nor 104 redundant) ones. A rule beside stage 2, not a third input to
# it: fitted as one, it moved stage 2's threshold on the second-document share for every other question
# (leave-one-dataset-out: written org JA multi-hop 0.870 -> 0.826). Stage 1 still decides first: a greeting or a
# translation request that happens to name two pages stays direct. A tenant's recalibration may turn it off
# (``TenantRouting``) where its outcomes show the threshold routes those questions better.
NAMED_DOCUMENTS = 2
RETRIEVE: Route = "single_hop"  # stage 1's label for "search the knowledge base" (stage 2 says how)
# Stage 2 answers multi_hop at this probability unless the tenant's routing was recalibrated from its traffic.
DEFAULT_MULTI_HOP_THRESHOLD = 0.5
# Hex digits of a router version: short enough to read in a log line or a response, ample for the few a deployment sees.
ROUTER_VERSION_CHARS = 12


@dataclass(frozen=True)
class KnowledgeModel:
    retrieve: LogisticModel  # classes: direct / single_hop (= retrieve)
    spread: LogisticModel  # classes: single_hop / multi_hop

    @functools.cached_property
    def version(self) -> str:
        """A short stable name of the model that computes ``p(multi_hop)``: a digest of the spread model's
        classes and parameters, and of the signals it reads.

        A tenant's recalibrated threshold, and the route outcomes it was fitted on, are only meaningful for the
        probabilities of the model they were made with: a retrained router (other training data, other signals)
        gives the same question another ``p(multi_hop)``. The digest changes exactly when those probabilities can,
        and is the same whether the model was trained in this process or loaded from its artefact (the ``.npz``
        keeps the float64 arrays bit for bit), so every replica of one release names its router alike.
        """
        spread = self.spread
        digest = hashlib.sha256(f"s{SIGNAL_VERSION}:{','.join(SPREAD_SIGNALS)}:{','.join(spread.classes)}".encode())
        for array in (spread.coef, spread.intercept, spread.feature_mean, spread.feature_scale):
            values = np.ascontiguousarray(array, dtype="<f8")
            digest.update(repr(values.shape).encode())
            digest.update(values.tobytes())
        return digest.hexdigest()[:ROUTER_VERSION_CHARS]


@dataclass(frozen=True, slots=True)
class TenantRouting:
    """How one tenant's questions are routed where an operator recalibrated it from the tenant's route outcomes
    (``gateway.curation.routing``): stage 2's threshold on ``p(multi_hop)``, and whether the named-documents rule
    decides. The defaults are the router's own. The rule is the tenant's to turn off because its pages may be titled
    with names its users join in one request ("Is Beacon supported on Tidewater?" where one page answers): no
    threshold reaches a decision the rule made."""

    multi_hop_threshold: float = DEFAULT_MULTI_HOP_THRESHOLD
    named_documents: bool = True


DEFAULT_ROUTING = TenantRouting()


def threshold_applies(calibrated_for: str | None, router_version: str | None) -> bool:
    """Whether a threshold calibrated for router ``calibrated_for`` applies to router ``router_version``: only the
    same version's probabilities are on its scale, and one recorded without a version applies to none."""
    return calibrated_for is not None and calibrated_for == router_version


def retrieve_row(question: str, signals: ProbeSignals, cues: Sequence[str] | None = None) -> np.ndarray:
    """``cues``: the question's :func:`active_cues`, when the caller has them already (one regex pass a request)."""
    active = set(active_cues(question) if cues is None else cues)
    values = [float(getattr(signals, n)) for n in RETRIEVE_SIGNALS] + [float(c in active) for c in DIRECT_CUES]
    return np.asarray(values, dtype=np.float32)


def spread_row(signals: ProbeSignals) -> np.ndarray:
    return np.asarray([float(getattr(signals, n)) for n in SPREAD_SIGNALS], dtype=np.float32)


def case_signals(
    cases: Sequence[Case],
    tenants: dict[str, CorpusTenant],
    embed: EmbedTexts,
    depth: int = PROBE_DEPTH,
    embed_queries: EmbedTexts | None = None,
) -> list[ProbeSignals]:
    """Each case's question probed against its tenant, as the gateway would: the question embedded as a query
    (``embed_queries``; an asymmetric model such as e5 embeds a query and a passage differently), the passages with
    ``embed``. Without ``embed_queries`` questions are embedded as passages are (USE makes no difference)."""
    vectors = (embed_queries or embed)([c.text for c in cases])
    return [
        read_signals(case.text, tenants[case.tenant].search(embed, vector, depth))[0]
        for case, vector in zip(cases, vectors, strict=True)
    ]


def _fit(rows: list[np.ndarray], routes: list[Route]) -> LogisticModel:
    return fit_matrix(np.zeros((len(rows), 0), dtype=np.float32), np.vstack(rows), routes)


def fit_knowledge(cases: Sequence[Case], signals: Sequence[ProbeSignals]) -> KnowledgeModel:
    retrieve = _fit(
        [retrieve_row(c.text, s) for c, s in zip(cases, signals, strict=True)],
        ["direct" if c.route == "direct" else RETRIEVE for c in cases],
    )
    kb = [(c, s) for c, s in zip(cases, signals, strict=True) if c.route != "direct"]
    spread = _fit([spread_row(s) for _, s in kb], [c.route for c, _ in kb])
    return KnowledgeModel(retrieve, spread)


def training_files() -> list[bytes]:
    """Every file the training tenants' passages come from: a changed document retrains the router instead of
    reusing an artefact trained on the old text."""
    names = (PASSAGES_FILE, KB_FILE, *REDUNDANT_FILES.values())
    return [(resources.files("routes") / "data" / name).read_bytes() for name in names]


def artefact_path(cache_dir: Path, cases: Sequence[Case], embedder: str, chunking: str, stage: str) -> Path:
    """``embedder``: the embedder's fingerprint (``EmbeddingSettings.fingerprint``), everything that decides the
    vectors the router was fitted on: another model, prefix or input type trains a router of its own."""
    digest = hashlib.sha256()
    for case in cases:
        digest.update(f"{case.route}\t{case.tenant}\t{case.text}\n".encode())
    for data in training_files():
        digest.update(data)
    safe = "".join(ch if ch.isalnum() else "-" for ch in f"{embedder}-{chunking}")
    versions = f"f{FEATURE_VERSION}-s{SIGNAL_VERSION}-d{PROBE_DEPTH}-{stemmer_version()}"
    return cache_dir / f"knowledge-router-{stage}-{digest.hexdigest()[:16]}-{versions}-{safe}.npz"


def load_or_train(
    cache_dir: Path,
    embed: EmbedTexts,
    embedder: str,
    split: Callable[[str], list[str]],
    chunking: str,
    embed_queries: EmbedTexts | None = None,
) -> KnowledgeModel:
    """``split`` and ``chunking`` are the gateway's chunker and its settings: training probes see the
    same passages a tenant's store would hold. ``embed_queries``: the questions' embedding (``case_signals``)."""
    cases = all_cases()
    trained: list[KnowledgeModel] = []

    def train() -> KnowledgeModel:
        if not trained:
            trained.append(
                fit_knowledge(cases, case_signals(cases, load_tenants(split), embed, embed_queries=embed_queries))
            )
        return trained[0]

    def path(stage: str) -> Path:
        return artefact_path(cache_dir, cases, embedder, chunking, stage)

    what = f"{len(cases)} probed cases"
    retrieve = cached_model(path("retrieve"), lambda: train().retrieve, what)
    spread = cached_model(path("spread"), lambda: train().spread, what)
    return KnowledgeModel(retrieve, spread)


def _probabilities(model: LogisticModel, row: np.ndarray) -> dict[str, float]:
    return dict(zip(model.classes, model.cue_probabilities(row.tolist()), strict=True))


class KnowledgeRouter:
    name = "logistic"

    def __init__(self, model: KnowledgeModel) -> None:
        self._model = model

    @property
    def version(self) -> str:
        """The version of the model behind this router's ``p(multi_hop)`` (:attr:`KnowledgeModel.version`)."""
        return self._model.version

    def classify(self, query: str, probe: Probe, routing: TenantRouting = DEFAULT_ROUTING) -> RouteDecision:
        """``routing``: the tenant's, where an operator recalibrated it from the tenant's own traffic."""
        if probe.empty:
            reason = "the tenant's knowledge base returned nothing for this question"
            return RouteDecision("direct", 1.0, reason, self.name, probe)
        s = probe.signals
        cues = active_cues(query)
        cue_text = f"; cues: {', '.join(cues)}" if cues else ""
        p_retrieve = _probabilities(self._model.retrieve, retrieve_row(query, s, cues)).get(RETRIEVE, 0.0)
        found = (
            f"top score {s.top_score:.2f}, question words covered by the best document {s.best_coverage:.2f}, "
            f"by the top {s.documents} documents {s.union_coverage:.2f}"
        )
        if p_retrieve < 0.5:
            reason = f"p(retrieve)={p_retrieve:.2f}: {found}{cue_text}"
            return RouteDecision("direct", 1.0 - p_retrieve, reason, self.name, probe)
        spread = _probabilities(self._model.spread, spread_row(s))
        p_multi = spread.get("multi_hop", 0.0)
        named = s.titled_documents >= NAMED_DOCUMENTS
        ruled = named and routing.named_documents
        naming = ""
        if named:
            naming = f"; the question asks about {s.titled_documents} of them by title" + (
                "" if ruled else " (the tenant's calibration turned that rule off)"
            )
        threshold = routing.multi_hop_threshold
        route: Route = "multi_hop" if ruled or p_multi >= threshold else "single_hop"
        tenant_threshold = "" if threshold == DEFAULT_MULTI_HOP_THRESHOLD else f" (tenant threshold {threshold:.2f})"
        reason = (
            f"p(retrieve)={p_retrieve:.2f}: {found}; p(multi_hop)={p_multi:.2f}{tenant_threshold}: a second "
            f"document holds {s.second_document_share:.2f} of the words the best one lacks, "
            f"{s.covering_documents} documents cover the question's parts, the best and that second one share "
            f"{s.shared_figures} figures{naming}{cue_text}"
        )
        return RouteDecision(
            route,
            p_retrieve * (1.0 if ruled else spread.get(route, 0.0)),
            reason,
            self.name,
            probe,
            # Recorded for the rule's decisions too: with the rule turned off, the threshold decides them, and a
            # recalibration weighs the two on them (``named_documents`` keeps them apart from the threshold's own).
            p_multi_hop=p_multi,
            router_version=self._model.version,
            named_documents=named,
        )
