"""What learning the reader costs a request: ``Identity.reader`` with no user, trusted headers, and a user token
(RS256 and ES256, the keys already fetched from a loopback JWKS), in CPU microseconds per request.

``python -m tests.benchmarks.identity_cost --requests 2000``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx
from litestar.datastructures import Headers

from gateway.access.identity import GROUPS_HEADER, TOKEN_HEADER, USER_HEADER, Identity, SigningKeys, TokenVerifier
from gateway.access.keys import Principal
from gateway.settings import IdentitySettings
from tests.fakes.identity_provider import AUDIENCE, ISSUER, ec_key, jwks_server, rsa_key, token

INGRESS = Principal(
    name="ingress", tenant="acme", scopes=frozenset({"query"}), acts_for_users=True, trusts_user_headers=True
)


async def per_request_us(run: Callable[[], Awaitable[object]], requests: int, rounds: int = 3) -> float:
    """Median over ``rounds`` of the process CPU per call, in microseconds."""
    figures = []
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(requests):
            await run()
        figures.append((time.process_time() - started) / requests * 1e6)
    return statistics.median(figures)


async def measure(requests: int) -> None:
    rsa, ec = rsa_key("rsa-1"), ec_key("ec-1")
    with jwks_server(rsa, ec) as server:
        settings = IdentitySettings(issuer=ISSUER, audience=AUDIENCE, jwks_url=server.url)
        async with httpx.AsyncClient() as http:
            identity = Identity(settings, TokenVerifier(settings, SigningKeys(http, settings)))
            cases = {
                "no user": Headers({}),
                "trusted headers (3 groups)": Headers({USER_HEADER: "carol", GROUPS_HEADER: "hr,staff,finance"}),
                "token RS256 (2048-bit)": Headers({TOKEN_HEADER: token(rsa)}),
                "token ES256 (P-256)": Headers({TOKEN_HEADER: token(ec)}),
            }
            for headers in cases.values():  # the keys fetched, once, before anything is timed
                await identity.reader(INGRESS, headers)
            print(f"{'case':<28} CPU µs per request (median of 3 rounds of {requests})")
            for name, headers in cases.items():

                async def run(headers: Headers = headers) -> object:
                    return await identity.reader(INGRESS, headers)

                print(f"{name:<28} {await per_request_us(run, requests):8.1f}")
            print(f"JWKS fetches: {server.fetched()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    asyncio.run(measure(parser.parse_args().requests))


if __name__ == "__main__":
    main()
