"""``GET``/``PUT``/``DELETE /v1/assistant-profile``: a tenant's assistant profile, for admin keys."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import JSONBody, QueryParameter

from gateway.access import BEARER, Principal, require
from gateway.errors import NotFoundError, ProviderUnavailableError, problem_responses
from gateway.profiles.schemas import ProfileDeleted, ProfileOut, ProfileRequest, profile_out, valid_profile
from gateway.profiles.service import Profiles
from gateway.providers import TENANT_PATTERN

TenantParam = Annotated[str, QueryParameter(pattern=TENANT_PATTERN)]


def provide_profiles(state: State) -> Profiles:
    profiles: Profiles | None = state.get("profiles")
    if profiles is None:
        raise ProviderUnavailableError("assistant profiles are not available", provider="profile_store")
    return profiles


class ProfileController(Controller):
    path = "/v1/assistant-profile"
    tags = ["profiles"]
    # A profile decides what every client of the tenant is told, and what it costs.
    before_request = require("admin")
    security = [{BEARER: []}]

    @get(
        "/",
        summary="The tenant's assistant profile (the gateway's default when it has none: configured=false)",
        responses=problem_responses(400, 401, 403, 429, 503),
    )
    async def read(
        self,
        profiles: NamedDependency[Profiles],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
    ) -> ProfileOut:
        tenant = principal.tenant_for(tenant)
        store = profiles.store
        stored = await store.get(tenant) if store is not None else None  # fresh: an admin reads what is stored
        return profile_out(stored or profiles.default(tenant))

    @put(
        "/",
        status_code=200,
        summary="Replace the tenant's assistant profile (every field; left out: its default)",
        responses=problem_responses(400, 401, 403, 413, 429, 503),
    )
    async def write(
        self,
        data: JSONBody[ProfileRequest],
        profiles: NamedDependency[Profiles],
        principal: NamedDependency[Principal],
    ) -> ProfileOut:
        profile = valid_profile(data, principal.tenant_for(data.tenant), profiles.settings)
        return profile_out(await profiles.save(profile))

    @delete(
        "/",
        status_code=200,
        summary="Remove the tenant's profile: the gateway's default answers again",
        responses=problem_responses(400, 401, 403, 404, 429, 503),
    )
    async def remove(
        self,
        profiles: NamedDependency[Profiles],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
    ) -> ProfileDeleted:
        tenant = principal.tenant_for(tenant)
        if not await profiles.remove(tenant):
            raise NotFoundError(f"Tenant {tenant!r} has no assistant profile.")
        return ProfileDeleted(deleted=True, tenant=tenant)
