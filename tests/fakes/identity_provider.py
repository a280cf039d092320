"""A local OIDC identity provider for the identity tests: real RSA/EC keys, a JWKS served over loopback HTTP, and
tokens signed with those keys (or forged the ways an attacker would).

The JWKS server is a real ``ThreadingHTTPServer`` on a free loopback port, so the gateway fetches keys exactly as
it would from a real provider (its httpx client, timeouts, status codes); it counts the fetches, so a test can
tell a cached key from a fetched one. ``publish`` swaps the published keys, as a provider rotating them does;
``hold`` keeps each answer until its event is set, as a provider that has stalled does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.ports import free_port

ISSUER = "https://idp.example.test/realms/acme"
AUDIENCE = "rag-gateway"
HOLD_LIMIT_S = 10.0


@dataclass(frozen=True)
class SigningKey:
    kid: str
    algorithm: str
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

    def jwk(self, *, with_alg: bool = True) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            data: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(public))
        else:
            data = json.loads(ECAlgorithm.to_jwk(public))
        data.update(kid=self.kid, use="sig")
        if with_alg:
            data["alg"] = self.algorithm
        return data

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def rsa_key(kid: str, algorithm: str = "RS256") -> SigningKey:
    return SigningKey(kid, algorithm, rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ec_key(kid: str) -> SigningKey:
    return SigningKey(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def claims(subject: str = "alice", **changes: Any) -> dict[str, Any]:
    """A valid token's claims, one hour left; ``changes`` override (``None`` removes a claim)."""
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": subject,
        "iat": now,
        "nbf": now,
        "exp": now + 3600,
        "groups": ["finance", "staff"],
    }
    base.update(changes)
    return {name: value for name, value in base.items() if value is not None}


def token(key: SigningKey, **changes: Any) -> str:
    return jwt.encode(claims(**changes), key.private, algorithm=key.algorithm, headers={"kid": key.kid})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(kid: str, **changes: Any) -> str:
    """``alg: none``: no signature at all."""
    header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    return f"{header}.{_b64(json.dumps(claims(**changes)).encode())}."


def hmac_with_public_key(key: SigningKey, **changes: Any) -> str:
    """Algorithm confusion: HS256 "signed" with the provider's public key (which anyone can read) as the secret. A
    verifier that let the token's header pick the algorithm would check it with that same public key, and pass it."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    body = _b64(json.dumps(claims(**changes)).encode())
    signature = hmac.new(key.public_pem(), f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(signature)}"


@dataclass
class JwksServer:
    """The provider's JWKS endpoint. ``status`` other than 200 answers that status (an outage); ``hold`` set: each
    fetch is counted at once and answered only when the event is set (at most ``HOLD_LIMIT_S`` later)."""

    url: str
    keys: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    fetches: int = 0
    hold: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, *keys: SigningKey, with_alg: bool = True) -> None:
        with self.lock:
            self.keys = [key.jwk(with_alg=with_alg) for key in keys]

    def fetched(self) -> int:
        with self.lock:
            return self.fetches


@contextmanager
def jwks_server(*keys: SigningKey) -> Iterator[JwksServer]:
    """A JWKS server on a free loopback port, publishing ``keys`` from the start (none: an empty set)."""
    port = free_port()
    served = JwksServer(url=f"http://127.0.0.1:{port}/protocol/openid-connect/certs")
    served.publish(*keys)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with served.lock:
                served.fetches += 1
                hold = served.hold
            if hold is not None:
                hold.wait(HOLD_LIMIT_S)  # bounded, so a test that forgets to release it cannot hang the server
            with served.lock:
                status, body = served.status, json.dumps({"keys": served.keys}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
