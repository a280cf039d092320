"""The curators' review page: open gaps with their evidence, a form to add a verified document to a
gap, and the before/after result. Server-rendered (Jinja2 templates), plain HTML forms, no script.

The page is part of the console (mounted under ``/console``): a curator signs in there once, or an
authenticating proxy presents an admin key in a header; its form carries the console's CSRF token.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body, PathParameter
from litestar.response import Template

from gateway.access import ConsoleAccess, Principal
from gateway.curation.controller import TenantParam
from gateway.curation.evaluator import Rule, RuleKind
from gateway.curation.schemas import gap_out, iso, resolution_out
from gateway.curation.service import Curation
from gateway.errors import ClientError
from gateway.knowledge import DocumentIn, valid_documents
from gateway.settings import Settings

FORM_RULES: tuple[RuleKind, ...] = ("must_contain", "must_not_contain", "pattern")


def form_rules(form: dict[str, str]) -> list[Rule]:
    """One rule per non-empty line of each rule field; ``2 | text`` gives a line the weight 2."""
    rules = []
    for kind in FORM_RULES:
        for line in form.get(kind, "").splitlines():
            weight, bar, value = line.partition("|")
            if not bar:
                weight, value = "1", line
            if value.strip():
                try:
                    rules.append(Rule(kind=kind, value=value.strip(), weight=float(weight)))
                except ValueError as exc:
                    raise ClientError(f"rule weight {weight!r} is not a number") from exc
    return rules


class ReviewController(Controller):
    path = "/review"
    before_request = ConsoleAccess("admin")
    include_in_schema = False

    @get("/")
    async def gaps(
        self,
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
        tenant: TenantParam = "default",
    ) -> Template:
        tenant = principal.tenant_for(tenant)
        gaps = [gap_out(g, curation.nobody().visibility) for g in await curation.gaps(tenant)]
        return Template("gaps.html", context={"tenant": tenant, "gaps": gaps})

    @post("/gaps/{gap_id:str}/resolve", status_code=200)
    async def resolve(
        self,
        gap_id: Annotated[str, PathParameter(max_length=80)],
        data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)],
        curation: NamedDependency[Curation],
        principal: NamedDependency[Principal],
        settings: NamedDependency[Settings],
    ) -> Template:
        tenant = principal.tenant_for(data.get("tenant", "default"))
        doc_id, text = data.get("doc_id", "").strip(), data.get("text", "").strip()
        if not doc_id or not text:
            raise ClientError("A verified document needs an id and a text.")
        typed = DocumentIn(id=doc_id, text=text, title=data.get("title", "").strip() or None)
        resolution = await curation.resolve(tenant, gap_id, valid_documents([typed], settings.limits), form_rules(data))
        context = {"tenant": tenant, "resolution": resolution_out(resolution), "at": iso(resolution.created_at)}
        return Template("result.html", context=context)
