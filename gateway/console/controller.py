"""The console's pages: sign-in, the playground, the knowledge base; the review page is mounted beside them.

Server-rendered (Jinja2), plain forms; the one script is the knowledge page's uploader, which sends each file on
its own so each shows its progress and outcome. Handlers stay thin: the query service answers, the knowledge base
ingests and deletes, :mod:`gateway.console.service` reads listings and draws the answer.

The playground and the knowledge base's listings read as the request's ``reader`` (the console's own dependency,
learnt by :class:`~gateway.access.ConsoleAccess`): an admin naming no user sees every document, anyone else what
their groups (or, naming nobody, the whole tenant) may read. Changing the knowledge base stays an admin's.
"""

from __future__ import annotations

from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import msgspec
from litestar import Controller, Request, Response, Router, get, post
from litestar.di import NamedDependency, Provide
from litestar.enums import RequestEncodingType
from litestar.middleware import DefineMiddleware
from litestar.middleware.csrf import CSRFMiddleware
from litestar.params import Body, QueryParameter
from litestar.response import Redirect, Template
from litestar.template.config import TemplateConfig

from gateway.access import (
    CONSOLE_PATH,
    Access,
    ConsoleAccess,
    ConsoleCookies,
    Identity,
    Principal,
    Reader,
    SignInRequiredError,
    provide_console_reader,
    session_for_key,
    session_for_tenant,
)
from gateway.console.schemas import AskForm, DeleteForm, SignInForm, UploadForm
from gateway.console.service import Catalogue, linked_answer, reader_view, waterfall
from gateway.curation import ReviewController
from gateway.errors import ClientError, GatewayError, NotFoundError, handle_exception
from gateway.knowledge import FilesResponse, KnowledgeBase, index_uploaded
from gateway.query import QueryRequest, QueryService, clean_query
from gateway.settings import Settings
from routes.types import RouteRequest

ROUTES: tuple[RouteRequest, ...] = ("auto", "direct", "single_hop", "multi_hop")
HOME = f"{CONSOLE_PATH}/playground"


class SignInController(Controller):
    path = "/"

    @get("/", include_in_schema=False)
    async def home(self) -> Redirect:
        return Redirect(HOME)

    @get("/sign-in", include_in_schema=False)
    async def sign_in_page(
        self,
        access: NamedDependency[Access],
        identity: NamedDependency[Identity],
        next_page: Annotated[str, QueryParameter(name="next")] = "",
    ) -> Template:
        return Template("console/sign_in.html", context=_sign_in_context(access, identity, next_page))

    @post("/sign-in", include_in_schema=False, status_code=303)
    async def sign_in(
        self,
        request: Request[Any, Any, Any],
        data: Annotated[SignInForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
        access: NamedDependency[Access],
        identity: NamedDependency[Identity],
    ) -> Response[Any]:
        try:
            if access.keys.open:
                session = session_for_tenant(data.tenant)
            else:
                session = await session_for_key(access.keys, identity, data.key, data.user_token)
        except GatewayError as exc:
            context = _sign_in_context(access, identity, data.next) | {"error": exc.detail}
            return Template("console/sign_in.html", context=context, status_code=exc.status_code)
        request.set_session(session)
        return Redirect(_local(data.next) or HOME, status_code=303)

    @post("/sign-out", include_in_schema=False, status_code=303)
    async def sign_out(self, request: Request[Any, Any, Any]) -> Redirect:
        request.clear_session()
        return Redirect(f"{CONSOLE_PATH}/sign-in", status_code=303)


class PlaygroundController(Controller):
    path = "/playground"
    before_request = ConsoleAccess("query")

    @get("/", include_in_schema=False)
    async def page(self, principal: NamedDependency[Principal], reader: NamedDependency[Reader]) -> Template:
        context = {"tenant": principal.tenant, "reader": reader_view(reader), "form": AskForm(), "routes": ROUTES}
        return Template("console/playground.html", context=context)

    @post("/", include_in_schema=False, status_code=200)
    async def ask(
        self,
        data: Annotated[AskForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
        query_service: NamedDependency[QueryService],
        settings: NamedDependency[Settings],
        principal: NamedDependency[Principal],
        reader: NamedDependency[Reader],
        access: NamedDependency[Access],
    ) -> Template:
        route = next((r for r in ROUTES if r == data.route), None)
        if route is None:
            raise ClientError(f"Unknown route {data.route!r}: one of {', '.join(ROUTES)}.")
        query = clean_query(data.query, settings.limits)
        request = QueryRequest(query=query, tenant=principal.tenant, route=route, include_passages=True)
        response = await query_service.answer(request, reader=reader)
        await access.limiter.charge(principal, response.usage.input_tokens + response.usage.output_tokens)
        context = {
            "tenant": principal.tenant,
            "reader": reader_view(reader),
            "form": data,
            "routes": ROUTES,
            "response": response,
            "answer": linked_answer(response.answer, response.passages or []),
            "bars": waterfall(response),
            "events": [msgspec.to_builtins(e) for e in response.events],
        }
        return Template("console/playground.html", context=context)


class KnowledgePagesController(Controller):
    """Reading the knowledge base is for every signed-in key, as far as its reader may see; uploads and deletes are
    an admin's (each handler's own hook: Litestar runs the closest layer's ``before_request`` only)."""

    path = "/knowledge"
    before_request = ConsoleAccess("query")

    @get("/", include_in_schema=False)
    async def documents(
        self,
        knowledge: NamedDependency[KnowledgeBase],
        principal: NamedDependency[Principal],
        reader: NamedDependency[Reader],
        search: Annotated[str, QueryParameter(name="q", max_length=200)] = "",
        deleted: Annotated[str, QueryParameter(max_length=1000)] = "",
    ) -> Template:
        tenant = principal.tenant
        admin = principal.allows("admin")
        context = {
            "tenant": tenant,
            "reader": reader_view(reader),
            "admin": admin,
            "search": search,
            "deleted": deleted if admin else "",
            "documents": await Catalogue(knowledge).documents(tenant, reader.visibility, search),
            # It moves on every change, restricted documents' too: only an admin's page shows it.
            "version": await knowledge.version(tenant) if admin else None,
        }
        return Template("console/knowledge.html", context=context)

    @get("/document", include_in_schema=False)
    async def document(
        self,
        knowledge: NamedDependency[KnowledgeBase],
        principal: NamedDependency[Principal],
        reader: NamedDependency[Reader],
        doc_id: Annotated[str, QueryParameter(name="id", min_length=1, max_length=1000)],
    ) -> Template:
        chunks = await Catalogue(knowledge).chunks(principal.tenant, doc_id, reader.visibility)
        if chunks == []:
            # A document the reader may not see is answered as a missing one, word for word.
            raise NotFoundError(f"Tenant {principal.tenant!r} has no document {doc_id!r}.")
        context = {"tenant": principal.tenant, "reader": reader_view(reader), "doc_id": doc_id, "chunks": chunks}
        return Template("console/document.html", context=context)

    @post("/files", include_in_schema=False, status_code=200, before_request=ConsoleAccess("admin"))
    async def upload(
        self,
        data: Annotated[UploadForm, Body(media_type=RequestEncodingType.MULTI_PART)],
        knowledge: NamedDependency[KnowledgeBase],
        settings: NamedDependency[Settings],
        principal: NamedDependency[Principal],
    ) -> FilesResponse:
        """The uploader's endpoint: the API's upload for the signed-in tenant (JSON, each file's outcome)."""
        return await index_uploaded(knowledge, principal.tenant, data.files, settings.limits, access=data.access)

    @post("/delete", include_in_schema=False, status_code=303, before_request=ConsoleAccess("admin"))
    async def delete(
        self,
        data: Annotated[DeleteForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
        knowledge: NamedDependency[KnowledgeBase],
        principal: NamedDependency[Principal],
    ) -> Redirect:
        if not await knowledge.delete(principal.tenant, data.doc_id):
            raise NotFoundError(f"Tenant {principal.tenant!r} has no document {data.doc_id!r}.")
        return Redirect(f"{CONSOLE_PATH}/knowledge/?{urlencode({'deleted': data.doc_id})}", status_code=303)


def console_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The console's errors: the same problem details as the API's (one mapping), as a page for a browser's page
    request, as JSON for the uploader; a page that needs a session sends the browser to sign in."""
    if isinstance(exc, SignInRequiredError) and request.method == "GET":
        # The page's query string too: a search or a document's id is part of where the reader was going.
        page = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return Redirect(f"{CONSOLE_PATH}/sign-in?next={quote(page)}")
    problem = handle_exception(request, exc)
    if "application/json" in request.headers.get("accept", ""):
        return problem
    content = problem.content if isinstance(problem.content, dict) else {}
    return Template(
        "console/error.html", context=content, status_code=problem.status_code or 500, headers=problem.headers
    )


def template_config() -> TemplateConfig[Any]:
    """The console's templates (``console/…``) and the review page's, which extend the console's layout."""
    from litestar.plugins.jinja import JinjaTemplateEngine

    packages = ("gateway.console", "gateway.curation")
    directories: list[Path | PathLike[Any] | str] = [Path(str(resources.files(p) / "templates")) for p in packages]
    return TemplateConfig(directory=directories, engine=JinjaTemplateEngine)


def console_router(cookies: ConsoleCookies, settings: Settings) -> Router:
    """The console under /console, with its CSRF middleware and its error pages (its sessions' middleware is the
    app's: ``cookies.session.middleware``)."""
    return Router(
        CONSOLE_PATH,
        route_handlers=[SignInController, PlaygroundController, KnowledgePagesController, ReviewController],
        middleware=[DefineMiddleware(CSRFMiddleware, config=cookies.csrf)],
        exception_handlers={Exception: console_error},
        # The console's reader, learnt by its hook with the console's rules, replaces the API's.
        dependencies={"reader": Provide(provide_console_reader, sync_to_thread=False)},
        request_max_body_size=settings.limits.max_upload_bytes,
        include_in_schema=False,
    )


def _sign_in_context(access: Access, identity: Identity, next_page: str) -> dict[str, Any]:
    """The sign-in form: a tenant in open mode, else a key, and a user token where an identity provider verifies
    them."""
    return {"open": access.keys.open, "tokens": identity.verifies_tokens, "next": _local(next_page)}


def _local(path: str) -> str:
    """A page of the console to go to after signing in; anything else (another site) is dropped."""
    return path if path.startswith(CONSOLE_PATH + "/") else ""
