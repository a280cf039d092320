"""The gateway's file API as the folder sync uses it, over HTTP (so it works against a gateway in Kubernetes).

Transient refusals (429, 502-504, a dropped connection) are retried with backoff by tenacity, honouring nothing
cleverer than exponential waits: an upload is idempotent (same path, same content, same chunks), so resending
one that may have landed is safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from gateway.ingest.plan import IndexedEntry, LocalFile, held_access

TRANSIENT = {429, 502, 503, 504}


class IngestError(Exception):
    """The gateway refused a request the sync cannot go on without (bad key, wrong tenant, gateway down)."""


def _transient(error: BaseException) -> bool:
    if isinstance(error, httpx.HTTPStatusError):
        return error.response.status_code in TRANSIENT
    return isinstance(error, httpx.TransportError)


_retrying = retry(
    retry=retry_if_exception(_transient),
    stop=stop_after_attempt(5),
    wait=wait_exponential(multiplier=0.5, max=15),
    reraise=True,
)


@dataclass(frozen=True, slots=True)
class Outcome:
    file: str
    status: int
    chunks: int
    reason: str | None


class GatewayFiles:
    def __init__(self, url: str, key: str | None, tenant: str, timeout_s: float = 600.0) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)
        self._tenant = tenant

    def close(self) -> None:
        self._http.close()

    @_retrying
    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, params={"tenant": self._tenant}, **kwargs)
        if response.status_code in TRANSIENT:
            response.raise_for_status()
        return response

    def _refused(self, response: httpx.Response) -> IngestError:
        try:
            detail = response.json().get("detail") or response.text
        except ValueError:
            detail = response.text
        return IngestError(f"{response.request.method} {response.request.url.path}: {response.status_code} {detail}")

    def indexed(self) -> dict[str, IndexedEntry]:
        """The tenant's files as the gateway holds them: path -> (content hash, documents, access tags)."""
        try:
            response = self._send("GET", "/v1/files")
        except httpx.HTTPError as exc:
            raise IngestError(f"the gateway at {self._http.base_url} did not answer: {exc}") from exc
        if response.status_code != 200:
            raise self._refused(response)
        return {
            f["file"]: (f["sha256"], f["documents"], held_access(f.get("access"))) for f in response.json()["files"]
        }

    def upload(self, files: list[LocalFile]) -> tuple[list[Outcome], int | None]:
        """Each file's outcome, and the tenant's knowledge version after the upload. The files share one access
        (``plan.batches``), sent as the form's ``access`` field."""
        parts = [("files", (f.name, f.path.read_bytes(), "application/octet-stream")) for f in files]
        access = files[0].access_field if files else None
        form = {"access": access} if access is not None else None
        try:
            response = self._send("POST", "/v1/files", files=parts, data=form)
        except httpx.HTTPError as exc:
            raise IngestError(f"upload failed: {exc}") from exc
        body = response.json() if response.headers.get("content-type", "").endswith("json") else {}
        if "files" not in body:
            if response.status_code == 413:  # the whole request, over the gateway's upload limit
                return [Outcome(f.name, 413, 0, "the upload is over the gateway's limit") for f in files], None
            raise self._refused(response)
        outcomes = [Outcome(f["file"], f["status"], f.get("chunks", 0), f.get("reason")) for f in body["files"]]
        return outcomes, body.get("knowledge_version")

    def delete(self, document: str) -> None:
        try:
            response = self._send("DELETE", f"/v1/documents/{document}")
        except httpx.HTTPError as exc:
            raise IngestError(f"delete failed: {exc}") from exc
        if response.status_code not in (200, 404):  # 404: deleted already (an earlier, interrupted run)
            raise self._refused(response)
