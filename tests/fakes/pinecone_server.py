"""A local fake of Pinecone's data-plane REST API, for testing adapters through the real client.

Paths, methods and camelCase JSON match what the installed ``pinecone`` client (10.x) sends and
decodes, so a test exercises the client's encoding, decoding, retries and error types without an
account or a network. Vectors live in memory per namespace and queries score by real cosine
similarity. The serverless limits an adapter must respect are enforced rather than papered over:
delete-by-filter and stats-by-filter are refused, list pages hold at most 100 ids, an upsert or
delete at most 1000, metadata must be flat, and every vector must have the index's dimension.
"""

from __future__ import annotations

import base64
import json
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

FAKE_API_KEY = "fake-pinecone-key"
MAX_BATCH = 1000
MAX_LIST_PAGE = 100
MAX_FETCH = 1000

Reply = tuple[int, dict[str, Any]]


class _BadRequest(Exception):
    """A request the real service would answer with 400."""


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def _unb64(token: str) -> str:
    return base64.urlsafe_b64decode(token.encode()).decode()


def _cosine(a: list[float], b: list[float]) -> float:
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return 0.0 if norms == 0 else sum(x * y for x, y in zip(a, b, strict=True)) / norms


def _matches(where: Any, metadata: dict[str, Any]) -> bool:
    """The filters the gateway sends, as Pinecone evaluates them: ``{"field": {"$in": [...]}}`` (a list-of-strings
    field matches when any of its strings is listed), ``{"field": {"$exists": bool}}``, and ``$and`` / ``$or`` of
    those. Anything else is refused, so the adapter cannot lean on more."""
    if not isinstance(where, dict) or len(where) != 1:
        raise _BadRequest("the fake implements one {field: condition} or {$and|$or: [...]} filter")
    ((field, condition),) = where.items()
    if field in ("$and", "$or"):
        if not isinstance(condition, list) or not condition:
            raise _BadRequest(f"{field} takes a non-empty list of filters")
        results = [_matches(part, metadata) for part in condition]
        return all(results) if field == "$and" else any(results)
    if not isinstance(condition, dict) or len(condition) != 1:
        raise _BadRequest("the fake implements $in and $exists only")
    value = metadata.get(field)
    if set(condition) == {"$exists"} and isinstance(condition["$exists"], bool):
        return (field in metadata) == condition["$exists"]
    if set(condition) != {"$in"} or not isinstance(condition["$in"], list):
        raise _BadRequest("the fake implements $in and $exists only")
    held = value if isinstance(value, list) else [value]
    return any(item in condition["$in"] for item in held)


def _flat_metadata(value: Any) -> dict[str, Any]:
    """Pinecone accepts only strings, numbers, booleans and lists of strings as metadata values."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _BadRequest("metadata must be an object")
    for key, item in value.items():
        ok = isinstance(item, str | int | float | bool) or (
            isinstance(item, list) and all(isinstance(s, str) for s in item)
        )
        if not ok:
            raise _BadRequest(f"Metadata value for field {key!r} must be a string, number, boolean or list of strings")
    return dict(value)


@dataclass
class FakePinecone:
    """The fake's state; tests read ``namespaces`` and ``requests`` and may set ``fail_with``."""

    dimension: int
    api_key: str = FAKE_API_KEY
    url: str = ""
    namespaces: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    fail_with: int | None = None  # while set, every request is answered with this status
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ids(self, namespace: str) -> list[str]:
        with self.lock:
            return sorted(self.namespaces.get(namespace, {}))

    def count(self, method: str, path: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r == (method, path))

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: bytes, key: str | None) -> Reply:
        with self.lock:
            self.requests.append((method, path))
            if self.fail_with is not None:
                return self.fail_with, {"code": 14, "message": "fake outage", "details": []}
            if key != self.api_key:
                return 401, {
                    "error": {"code": "UNAUTHENTICATED", "message": "Invalid API Key"},
                    "status": 401,
                }
            route = {
                ("POST", "/vectors/upsert"): self._upsert,
                ("POST", "/query"): self._query,
                ("POST", "/vectors/delete"): self._delete,
                ("GET", "/vectors/list"): self._list,
                ("GET", "/vectors/fetch"): self._fetch,
                ("POST", "/describe_index_stats"): self._stats,
                ("GET", "/describe_index_stats"): self._stats,
            }.get((method, path))
            if route is None:
                return 404, {"code": 5, "message": f"no route {method} {path}", "details": []}
            try:
                payload = json.loads(body) if body else {}
                if not isinstance(payload, dict):
                    raise _BadRequest("body must be a JSON object")
                return 200, route(payload, query)
            except (_BadRequest, ValueError, KeyError, TypeError) as exc:
                return 400, {"code": 3, "message": str(exc), "details": []}

    def _values(self, raw: Any) -> list[float]:
        if not isinstance(raw, list) or not all(isinstance(x, int | float) for x in raw):
            raise _BadRequest("values must be a list of numbers")
        if len(raw) != self.dimension:
            raise _BadRequest(f"Vector dimension {len(raw)} does not match the dimension of the index {self.dimension}")
        return [float(x) for x in raw]

    def _upsert(self, payload: dict[str, Any], _: dict[str, list[str]]) -> dict[str, Any]:
        vectors = payload["vectors"]
        if not isinstance(vectors, list) or not 0 < len(vectors) <= MAX_BATCH:
            raise _BadRequest(f"vectors must hold 1 to {MAX_BATCH} items")
        staged = {
            str(v["id"]): {"values": self._values(v["values"]), "metadata": _flat_metadata(v.get("metadata"))}
            for v in vectors
        }
        self.namespaces.setdefault(payload.get("namespace", ""), {}).update(staged)
        return {"upsertedCount": len(staged)}

    def _query(self, payload: dict[str, Any], _: dict[str, list[str]]) -> dict[str, Any]:
        top_k = int(payload["topK"])
        namespace = payload.get("namespace", "")
        stored = self.namespaces.get(namespace, {})
        if "filter" in payload:
            stored = {vid: v for vid, v in stored.items() if _matches(payload["filter"], v["metadata"])}
        if "vector" in payload:
            query = self._values(payload["vector"])
        elif payload.get("id") in stored:
            query = stored[payload["id"]]["values"]
        else:
            raise _BadRequest("query needs a vector or the id of a stored vector")
        scored = sorted(((-_cosine(query, v["values"]), vid) for vid, v in stored.items()))[:top_k]
        matches = []
        for neg_score, vid in scored:
            match: dict[str, Any] = {"id": vid, "score": -neg_score, "values": []}
            if payload.get("includeValues"):
                match["values"] = stored[vid]["values"]
            if payload.get("includeMetadata") and stored[vid]["metadata"]:
                match["metadata"] = stored[vid]["metadata"]
            matches.append(match)
        return {"matches": matches, "namespace": namespace, "usage": {"readUnits": 1}}

    def _delete(self, payload: dict[str, Any], _: dict[str, list[str]]) -> dict[str, Any]:
        if "filter" in payload:
            raise _BadRequest("Serverless and Starter indexes do not support deleting with metadata filtering")
        namespace = payload.get("namespace", "")
        if payload.get("deleteAll"):
            self.namespaces.pop(namespace, None)
            return {}
        ids = payload["ids"]
        if not isinstance(ids, list) or not 0 < len(ids) <= MAX_BATCH:
            raise _BadRequest(f"ids must hold 1 to {MAX_BATCH} items")
        stored = self.namespaces.get(namespace, {})
        for vid in ids:
            stored.pop(vid, None)
        if not stored:
            self.namespaces.pop(namespace, None)
        return {}

    def _list(self, _: dict[str, Any], query: dict[str, list[str]]) -> dict[str, Any]:
        namespace = query.get("namespace", [""])[0]
        prefix = query.get("prefix", [""])[0]
        limit = int(query.get("limit", [str(MAX_LIST_PAGE)])[0])
        if not 0 < limit <= MAX_LIST_PAGE:
            raise _BadRequest(f"limit must be between 1 and {MAX_LIST_PAGE}")
        after = _unb64(query["paginationToken"][0]) if "paginationToken" in query else None
        ids = sorted(i for i in self.namespaces.get(namespace, {}) if i.startswith(prefix))
        if after is not None:
            ids = [i for i in ids if i > after]
        page = ids[:limit]
        reply: dict[str, Any] = {
            "vectors": [{"id": i} for i in page],
            "namespace": namespace,
            "usage": {"readUnits": 1},
        }
        if len(ids) > limit:
            reply["pagination"] = {"next": _b64(page[-1])}
        return reply

    def _fetch(self, _: dict[str, Any], query: dict[str, list[str]]) -> dict[str, Any]:
        namespace = query.get("namespace", [""])[0]
        ids = query.get("ids", [])
        if not ids or len(ids) > MAX_FETCH:
            raise _BadRequest(f"fetch takes 1 to {MAX_FETCH} ids")
        stored = self.namespaces.get(namespace, {})
        vectors = {
            i: {
                "id": i,
                "values": stored[i]["values"],
                **({"metadata": stored[i]["metadata"]} if stored[i]["metadata"] else {}),
            }
            for i in ids
            if i in stored
        }
        return {"vectors": vectors, "namespace": namespace, "usage": {"readUnits": 1}}

    def _stats(self, payload: dict[str, Any], _: dict[str, list[str]]) -> dict[str, Any]:
        if "filter" in payload:
            raise _BadRequest(
                "Serverless and Starter indexes do not support describing index stats with metadata filtering"
            )
        counts = {ns: {"vectorCount": len(v)} for ns, v in self.namespaces.items()}
        return {
            "namespaces": counts,
            "dimension": self.dimension,
            "indexFullness": 0.0,
            "totalVectorCount": sum(c["vectorCount"] for c in counts.values()),
            "metric": "cosine",
            "vectorType": "dense",
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # keep-alive connections must not block shutdown

    def __init__(self, fake: FakePinecone) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects from the real service
    disable_nagle_algorithm = True  # headers and body go out in separate writes; Nagle adds 40 ms
    server: _Server

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        status, payload = self.server.fake.handle(
            method, url.path, parse_qs(url.query), body, self.headers.get("Api-Key")
        )
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging; pytest output is for failures."""


@contextmanager
def running_fake_pinecone(dimension: int = 4, api_key: str = FAKE_API_KEY) -> Iterator[FakePinecone]:
    """Serve a fresh fake on a free 127.0.0.1 port; ``fake.url`` is the index host to give the client."""
    fake = FakePinecone(dimension=dimension, api_key=api_key)
    server = _Server(fake)
    host, port = server.server_address[:2]
    fake.url = f"http://{host!s}:{port}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-pinecone", daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
