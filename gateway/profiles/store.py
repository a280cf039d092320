"""Profiles in the gateway's relational store (the curation store's database and migrations).

One row per tenant; a write replaces the whole profile and counts its ``version`` up in the same
statement, so two admins writing at once get two versions, never one lost under the other's number.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.errors import ProviderUnavailableError
from gateway.profiles.model import AssistantProfile, RoutingCalibration
from gateway.providers import assistant_profiles, route_calibrations
from routes.types import ROUTES, Route

PROVIDER = "profile_store"


class ProfileStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    @asynccontextmanager
    async def _connection(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """A database error leaves as the gateway's provider error (503), translated here once."""
        try:
            async with self._engine.begin() if write else self._engine.connect() as connection:
                yield connection
        except (SQLAlchemyError, OSError) as exc:
            raise ProviderUnavailableError(f"profile store failed: {exc}", provider=PROVIDER) from exc

    async def get(self, tenant: str) -> AssistantProfile | None:
        query = select(assistant_profiles).where(assistant_profiles.c.tenant == tenant)
        async with self._connection(write=False) as connection:
            row = (await connection.execute(query)).mappings().first()
        return _profile(row) if row is not None else None

    async def routing_calibration(self, tenant: str) -> RoutingCalibration | None:
        """The tenant's recalibrated routing (``gateway.curation.routing``), if an operator applied one, with the
        router version it was calibrated for: whoever routes decides whether it still applies."""
        columns = route_calibrations.c
        query = select(columns.multi_hop_threshold, columns.router_version, columns.named_documents).where(
            columns.tenant == tenant
        )
        async with self._connection(write=False) as connection:
            row = (await connection.execute(query)).first()
        return None if row is None else RoutingCalibration(float(row[0]), row[1], bool(row[2]))

    async def put(self, profile: AssistantProfile) -> AssistantProfile:
        """Stores ``profile`` as the tenant's (its ``version`` and ``updated_at`` are the store's): the stored one."""
        values = _row(profile)
        now = time.time()
        try:
            return await self._write(profile.tenant, values, now)
        except ProviderUnavailableError as exc:
            if not isinstance(exc.__cause__, IntegrityError):
                raise
            # Another writer created the row between our update and insert: ours is the next version.
            return await self._write(profile.tenant, values, now)

    async def _write(self, tenant: str, values: dict[str, Any], now: float) -> AssistantProfile:
        async with self._connection(write=True) as connection:
            changed = await connection.execute(
                update(assistant_profiles)
                .where(assistant_profiles.c.tenant == tenant)
                .values(**values, version=assistant_profiles.c.version + 1, updated_at=now)
            )
            if not changed.rowcount:
                await connection.execute(
                    assistant_profiles.insert().values(tenant=tenant, **values, version=1, updated_at=now)
                )
            row = (
                (await connection.execute(select(assistant_profiles).where(assistant_profiles.c.tenant == tenant)))
                .mappings()
                .one()
            )
        return _profile(row)

    async def delete(self, tenant: str) -> bool:
        async with self._connection(write=True) as connection:
            gone = await connection.execute(delete(assistant_profiles).where(assistant_profiles.c.tenant == tenant))
        return bool(gone.rowcount)


def _row(profile: AssistantProfile) -> dict[str, Any]:
    return {
        "name": profile.name,
        "persona": profile.persona,
        "instructions": profile.instructions,
        "answer_language": profile.answer_language,
        "allowed_routes": list(profile.allowed_routes),
        "route_models": dict(profile.route_models),
        "allow_system_messages": profile.allow_system_messages,
    }


def _profile(row: Mapping[Any, Any]) -> AssistantProfile:
    allowed: tuple[Route, ...] = tuple(r for r in ROUTES if r in row["allowed_routes"])
    models: dict[Route, str] = {r: str(row["route_models"][r]) for r in ROUTES if r in row["route_models"]}
    return AssistantProfile(
        tenant=row["tenant"],
        name=row["name"],
        persona=row["persona"],
        instructions=row["instructions"],
        answer_language=row["answer_language"],
        allowed_routes=allowed,
        route_models=models,
        allow_system_messages=bool(row["allow_system_messages"]),
        configured=True,
        version=int(row["version"]),
        updated_at=float(row["updated_at"]),
    )
