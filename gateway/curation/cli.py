"""``python -m gateway.curation migrate``: the store's migrations (GATEWAY_CURATION_MIGRATE_ON_START=false).

``python -m gateway.curation recalibrate --tenant T [--apply] [--days 30] [--min-outcomes 20]``: the routing
threshold the tenant's route outcomes propose (``gateway.curation.routing``), stored only with ``--apply``.
Replicas pick an applied threshold up within GATEWAY_PROFILE_CACHE_TTL_S. It is fitted to, and stored for, the
router these settings route with (the artefact the replicas load, ``gateway.query.router_artefact``): run it where
the gateway runs, with its environment, so that it is the version the replicas apply it to.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from gateway.curation.routing import NoRouterProbabilityError, NotEnoughOutcomesError, recalibrate_tenant, route_report
from gateway.curation.store import CurationStore
from gateway.query import router_version
from gateway.settings import CurationSettings, Settings


async def _migrate() -> None:
    store = CurationStore.open(CurationSettings().database_url.get_secret_value())
    try:
        await store.migrate()
    finally:
        await store.close()


def _on(rule: bool) -> str:
    return "on" if rule else "off"


async def _recalibrate(tenant: str, *, apply: bool, days: float, min_outcomes: int, version: str | None) -> int:
    """``version``: the router the gateway routes with, which outcomes are judged against and the threshold is for."""
    store = CurationStore.open(CurationSettings().database_url.get_secret_value())
    try:
        report = await route_report(store, tenant, days, time.time(), version)
        print(
            f"tenant {tenant}, router {version or 'llm (no p(multi_hop))'}: outcomes {report.counts}, rated down "
            f"{report.disliked}, accuracy estimate {'n/a' if report.accuracy is None else f'{report.accuracy:.2f}'}"
            + (
                f"; {report.stale_outcomes} outcome(s) of another router version not counted"
                if report.stale_outcomes
                else ""
            )
            + f"; named-documents rule {_on(report.named_documents_rule)}"
            + (
                f", right on {report.named_accuracy:.2f} of its {report.named_outcomes} question(s) naming two "
                "documents"
                if report.named_accuracy is not None
                else ""
            )
        )
        if report.calibration_stale:
            print(
                "the applied threshold was calibrated for another router version: set aside, the default routes "
                "until it is recalibrated"
            )
        try:
            found = await recalibrate_tenant(
                store,
                tenant,
                days=days,
                min_outcomes=min_outcomes,
                apply=apply,
                now=time.time(),
                router_version=version,
            )
        except (NotEnoughOutcomesError, NoRouterProbabilityError) as exc:
            print(exc.detail, file=sys.stderr)
            return 1
    finally:
        await store.close()
    print(
        f"p(multi_hop) threshold {found.current_threshold:.3f} -> {found.multi_hop_threshold:.3f}, named-documents "
        f"rule {_on(found.current_named_documents)} -> {_on(found.named_documents)} ({found.named_outcomes} "
        f"outcome(s) of questions naming two documents): routes {found.accuracy_before:.2f} -> "
        f"{found.accuracy_after:.2f} of {found.outcomes} outcomes right; "
        + ("applied" if apply else "not applied (add --apply)")
    )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.curation")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", help="run the curation store's migrations")
    recalibrate = commands.add_parser(
        "recalibrate", help="a tenant's routing threshold and named-documents rule from its route outcomes"
    )
    recalibrate.add_argument("--tenant", required=True)
    recalibrate.add_argument("--apply", action="store_true", help="store the proposed threshold and rule")
    recalibrate.add_argument("--days", type=float, default=30.0)
    recalibrate.add_argument("--min-outcomes", type=int, default=20)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (argparse printed it) is an exit status, as for any command here
        return int(exc.code or 0)
    if args.command == "migrate":
        asyncio.run(_migrate())
        return 0
    version = router_version(Settings())  # the replicas' router: loaded from its artefact, as they load it
    return asyncio.run(
        _recalibrate(args.tenant, apply=args.apply, days=args.days, min_outcomes=args.min_outcomes, version=version)
    )
