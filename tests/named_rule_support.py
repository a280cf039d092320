"""The named-documents rule in the curation store, shared by the SQLite and the PostgreSQL tests: the migration that
adds it (outcomes written before it read back as not naming two documents, calibrations as keeping the rule on), and
that what is written now keeps it, through to the routing the profile store hands the query service."""

from __future__ import annotations

import dataclasses
import time

from sqlalchemy import text

from gateway.curation.routing import MIN_NAMED_OUTCOMES, RouteOutcome, recalibrate_tenant, route_report
from gateway.curation.store import CurationStore
from gateway.profiles.model import RoutingCalibration
from gateway.profiles.store import ProfileStore
from tests.migration_support import columns, migrate_to, schema_drift

TENANT = "acme"
VERSION = "0123456789ab"


def _named(response_id: str, p: float, at: float) -> RouteOutcome:
    """``multi_hop`` by the rule, answered from one document: the threshold would have routed it right."""
    return RouteOutcome(
        response_id,
        TENANT,
        "multi_hop",
        "multi_hop",
        "over_routed",
        p,
        at,
        router_version=VERSION,
        named_documents=True,
    )


async def named_documents_rule_across_the_migration(url: str) -> None:
    """A database at 0006 with an outcome and a calibration (as the gateway then wrote them) is upgraded: the outcome
    reads back as not naming two documents, the calibration with the rule on. Outcomes of the rule's questions are
    then recorded, the recalibration turns it off and stores that, and the profile store reads it; the migration goes
    down (the rows stay) and up again; the schema at head is the tables' exactly."""
    store = CurationStore.open(url)
    try:
        await migrate_to(store, "0006")
        assert "named_documents" not in await columns(store, "curation_route_outcomes")
        now = time.time()
        async with store.engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO curation_route_outcomes (id, tenant, classified_route, served_route, verdict, "
                    "p_multi_hop, disliked, created_at, router_version) VALUES ('resp_legacy', :tenant, 'single_hop', "
                    "'single_hop', 'right', 0.2, false, :at, :version)"
                ),
                {"tenant": TENANT, "at": now - 60, "version": VERSION},
            )
            await connection.execute(
                text(
                    "INSERT INTO route_calibrations (tenant, multi_hop_threshold, outcomes, accuracy_before, "
                    "accuracy_after, calibrated_at, router_version) VALUES (:tenant, 0.6, 20, 0.5, 0.9, :at, :version)"
                ),
                {"tenant": TENANT, "at": now - 60, "version": VERSION},
            )

        await store.migrate()
        await store.migrate()  # idempotent: start-up runs it on every boot
        assert await schema_drift(store) == []
        (legacy,) = await store.route_outcomes(TENANT, 0.0)
        assert legacy.named_documents is False
        applied = await store.calibration(TENANT)
        assert applied is not None
        assert (applied.named_documents, applied.named_outcomes) == (True, 0)
        profiles = ProfileStore(store.engine)
        assert await profiles.routing_calibration(TENANT) == RoutingCalibration(0.6, VERSION, True)

        named = [_named(f"resp_named_{i}", 0.1 + i / 20, now - 30 + i) for i in range(MIN_NAMED_OUTCOMES)]
        await store.add_route_outcomes(named)
        report = await route_report(store, TENANT, 1.0, now, VERSION)
        assert (report.named_documents_rule, report.named_outcomes, report.named_accuracy) == (True, len(named), 0.0)
        found = await recalibrate_tenant(
            store, TENANT, days=1.0, min_outcomes=4, apply=True, now=now, router_version=VERSION
        )
        assert (found.current_named_documents, found.named_documents, found.named_outcomes) == (True, False, len(named))
        assert found.accuracy_after == 1.0
        stored = await store.calibration(TENANT)
        assert stored is not None
        assert (stored.named_documents, stored.named_outcomes) == (False, len(named))
        assert await profiles.routing_calibration(TENANT) == RoutingCalibration(
            found.multi_hop_threshold, VERSION, False
        )
        assert (await route_report(store, TENANT, 1.0, now, VERSION)).named_documents_rule is False
        kept = {o.id: o.named_documents for o in await store.route_outcomes(TENANT, 0.0)}
        assert kept == {"resp_legacy": False} | {o.id: True for o in named}

        await migrate_to(store, "0006", down=True)
        assert "named_documents" not in await columns(store, "curation_route_outcomes")
        assert {"named_documents", "named_outcomes"}.isdisjoint(await columns(store, "route_calibrations"))
        async with store.engine.connect() as connection:  # the rows stay; only the rule's columns go
            ids = (await connection.execute(text("SELECT id FROM curation_route_outcomes"))).scalars().all()
        assert set(ids) == set(kept)
        await store.migrate()
        assert {o.named_documents for o in await store.route_outcomes(TENANT, 0.0)} == {False}
        again = await store.calibration(TENANT)
        assert again is not None
        assert dataclasses.astuple(again)[:7] == dataclasses.astuple(stored)[:7]
        assert again.named_documents is True  # a calibration read back from before the rule's column keeps it on
    finally:
        await store.close()
