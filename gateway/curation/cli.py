"""``python -m gateway.curation migrate``: the store's migrations (GATEWAY_CURATION_MIGRATE_ON_START=false).

``python -m gateway.curation recalibrate --tenant T [--apply] [--days 30] [--min-outcomes 20]``: the routing
threshold the tenant's route outcomes propose (``gateway.curation.routing``), stored only with ``--apply``.
Replicas pick an applied threshold up within GATEWAY_PROFILE_CACHE_TTL_S.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from gateway.curation.routing import NotEnoughOutcomesError, recalibrate_tenant, route_report
from gateway.curation.store import CurationStore
from gateway.settings import CurationSettings


async def _migrate() -> None:
    store = CurationStore.open(CurationSettings().database_url.get_secret_value())
    try:
        await store.migrate()
    finally:
        await store.close()


async def _recalibrate(tenant: str, *, apply: bool, days: float, min_outcomes: int) -> int:
    store = CurationStore.open(CurationSettings().database_url.get_secret_value())
    try:
        report = await route_report(store, tenant, days, time.time())
        print(
            f"tenant {tenant}: outcomes {report.counts}, rated down {report.disliked}, accuracy estimate "
            f"{'n/a' if report.accuracy is None else f'{report.accuracy:.2f}'}"
        )
        try:
            found = await recalibrate_tenant(
                store, tenant, days=days, min_outcomes=min_outcomes, apply=apply, now=time.time()
            )
        except NotEnoughOutcomesError as exc:
            print(exc.detail, file=sys.stderr)
            return 1
    finally:
        await store.close()
    print(
        f"p(multi_hop) threshold {found.current_threshold:.3f} -> {found.multi_hop_threshold:.3f}: routes "
        f"{found.accuracy_before:.2f} -> {found.accuracy_after:.2f} of {found.outcomes} outcomes right; "
        + ("applied" if apply else "not applied (add --apply)")
    )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.curation")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", help="run the curation store's migrations")
    recalibrate = commands.add_parser("recalibrate", help="a tenant's routing threshold from its route outcomes")
    recalibrate.add_argument("--tenant", required=True)
    recalibrate.add_argument("--apply", action="store_true", help="store the proposed threshold")
    recalibrate.add_argument("--days", type=float, default=30.0)
    recalibrate.add_argument("--min-outcomes", type=int, default=20)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (argparse printed it) is an exit status, as for any command here
        return int(exc.code or 0)
    if args.command == "migrate":
        asyncio.run(_migrate())
        return 0
    return asyncio.run(_recalibrate(args.tenant, apply=args.apply, days=args.days, min_outcomes=args.min_outcomes))
