"""Router versions in the curation store, shared by the SQLite and the PostgreSQL tests: the migration that adds them
(rows written before it read back with no version), that the migrations build exactly the tables queries are written
against, and that what is written now keeps its version."""

from __future__ import annotations

import time

from sqlalchemy import text

from gateway.curation.routing import RouteOutcome, recalibrate_tenant, route_report
from gateway.curation.store import CurationStore
from gateway.profiles.model import RoutingCalibration
from gateway.profiles.store import ProfileStore
from tests.migration_support import columns, migrate_to, schema_drift

TENANT = "acme"
OLD, NEW = "0123456789ab", "ba9876543210"
VERSIONED = ("curation_route_outcomes", "route_calibrations")


async def _versioned_tables(store: CurationStore) -> set[str]:
    """The route tables that have a ``router_version`` column."""
    return {t for t in VERSIONED if "router_version" in await columns(store, t)}


def _outcome(response_id: str, p: float, version: str | None, at: float) -> RouteOutcome:
    return RouteOutcome(response_id, TENANT, "multi_hop", "multi_hop", "over_routed", p, at, router_version=version)


async def router_versions_across_the_migration(url: str) -> None:
    """A database at 0004 with an outcome and a calibration (written as the gateway then wrote them) is upgraded: both
    read back with no router version, which makes them stale for any router; new writes keep their version; the
    migration goes down and up again; the schema at head is the tables' exactly."""
    store = CurationStore.open(url)
    try:
        await migrate_to(store, "0004")
        assert await _versioned_tables(store) == set()
        now = time.time()
        async with store.engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO curation_route_outcomes (id, tenant, classified_route, served_route, verdict, "
                    "p_multi_hop, disliked, created_at) VALUES ('resp_legacy', :tenant, 'multi_hop', 'multi_hop', "
                    "'over_routed', 0.8, false, :at)"
                ),
                {"tenant": TENANT, "at": now - 60},
            )
            await connection.execute(
                text(
                    "INSERT INTO route_calibrations (tenant, multi_hop_threshold, outcomes, accuracy_before, "
                    "accuracy_after, calibrated_at) VALUES (:tenant, 0.9, 20, 0.1, 0.95, :at)"
                ),
                {"tenant": TENANT, "at": now - 60},
            )

        await store.migrate()
        await store.migrate()  # idempotent: start-up runs it on every boot
        assert await _versioned_tables(store) == set(VERSIONED)
        assert await schema_drift(store) == []
        (legacy,) = await store.route_outcomes(TENANT, 0.0)
        assert (legacy.id, legacy.p_multi_hop, legacy.router_version) == ("resp_legacy", 0.8, None)
        applied = await store.calibration(TENANT)
        assert applied is not None
        assert applied.router_version is None
        assert applied.stale_for(NEW)  # made before versions were recorded: for no router anyone can name
        profiles = ProfileStore(store.engine)
        assert await profiles.routing_calibration(TENANT) == RoutingCalibration(0.9, None)

        await store.add_route_outcomes(
            [_outcome("resp_old", 0.7, OLD, now - 30), _outcome("resp_new", 0.6, NEW, now - 20)]
        )
        report = await route_report(store, TENANT, 1.0, now, NEW)
        assert report.counts == {"right": 0, "over_routed": 1, "under_routed": 0}
        assert report.stale_outcomes == 2  # the legacy one and the old router's
        assert report.calibration_stale
        found = await recalibrate_tenant(
            store, TENANT, days=1.0, min_outcomes=1, apply=True, now=now, router_version=NEW
        )
        assert (found.outcomes, found.router_version) == (1, NEW)
        assert found.current_threshold == 0.5  # the stale 0.9 was not in use: the default was
        stored = await store.calibration(TENANT)
        assert stored is not None
        assert (stored.router_version, stored.multi_hop_threshold) == (NEW, found.multi_hop_threshold)
        assert await profiles.routing_calibration(TENANT) == RoutingCalibration(found.multi_hop_threshold, NEW)
        versions = {o.id: o.router_version for o in await store.route_outcomes(TENANT, 0.0)}
        assert versions == {"resp_legacy": None, "resp_old": OLD, "resp_new": NEW}

        await migrate_to(store, "0004", down=True)
        assert await _versioned_tables(store) == set()
        async with store.engine.connect() as connection:  # the rows stay; only their versions go
            kept = (await connection.execute(text("SELECT id FROM curation_route_outcomes"))).scalars().all()
        assert set(kept) == set(versions)
        await store.migrate()
        assert await _versioned_tables(store) == set(VERSIONED)
        assert {o.router_version for o in await store.route_outcomes(TENANT, 0.0)} == {None}
    finally:
        await store.close()
