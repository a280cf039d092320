"""``python -m gateway.curation migrate``: the store's migrations (GATEWAY_CURATION_MIGRATE_ON_START=false)."""

from __future__ import annotations

import asyncio
import sys

from gateway.curation.store import CurationStore
from gateway.settings import CurationSettings


async def _migrate() -> None:
    store = CurationStore.open(CurationSettings().database_url.get_secret_value())
    try:
        await store.migrate()
    finally:
        await store.close()


def main(argv: list[str]) -> int:
    if argv != ["migrate"]:
        print("usage: python -m gateway.curation migrate", file=sys.stderr)
        return 2
    asyncio.run(_migrate())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
