"""Document permissions as the APIs take them: a document's ``access`` and the tags its chunks carry.

A client writes ``access`` as a list of group names (readers in any of them may read the document), as
``"tenant"`` (every reader of the tenant may), or leaves it out (``UNSET``: the tenant's policy decides, see
:mod:`pipelines.shared.visibility`). Group names are a short safe pattern that never starts with a reserved tag
("*", "~"), so no client can forge the tenant-open or the unset tag; anything else is a 422 problem before
anything is embedded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.errors import ClientError
from pipelines.shared import MAX_GROUP_CHARS, TENANT_OPEN, UNSET, is_group_name

TENANT_WIDE = "tenant"
MAX_GROUPS = 64  # per document: a filter list stays small


class InvalidAccessError(ClientError):
    """A document's ``access`` names no group, too many, or a name outside the pattern."""

    status_code = 422
    title = "Invalid document access"


def document_tags(access: str | Sequence[str] | None, *, what: str = "the document") -> tuple[str, ...]:
    """The access tags every chunk of a document carries: its groups (sorted, once each), ``TENANT_OPEN`` for
    ``"tenant"``, ``UNSET`` for none given. Raises :class:`InvalidAccessError` for anything else."""
    if access is None:
        return (UNSET,)
    if isinstance(access, str):
        if access != TENANT_WIDE:
            raise InvalidAccessError(
                f'The access of {what} is {access!r}: give a list of group names, or "tenant" for every reader of '
                "the tenant, or leave it out for the tenant's default."
            )
        return (TENANT_OPEN,)
    groups = list(access)
    if not groups:
        raise InvalidAccessError(
            f'The access of {what} lists no group: name at least one, or use "tenant" for every reader.'
        )
    if len(groups) > MAX_GROUPS:
        raise InvalidAccessError(f"The access of {what} lists {len(groups)} groups; the maximum is {MAX_GROUPS}.")
    for group in groups:
        if not is_group_name(group):
            raise InvalidAccessError(
                f"The access of {what} names {group!r}: a group name is 1 to {MAX_GROUP_CHARS} letters, digits, '_', "
                "'-', '.', ':' or '/', starting with a letter or a digit ('*' and '~' are reserved)."
            )
    return tuple(sorted(set(groups)))


def wire_access(tags: Sequence[str]) -> list[str] | str | None:
    """Tags as the API writes ``access``: the inverse of :func:`document_tags` (what ``GET /v1/files`` reports)."""
    held = tuple(tags)
    if not held or held == (UNSET,):
        return None
    if held == (TENANT_OPEN,):
        return TENANT_WIDE
    return sorted(tag for tag in held if tag not in (TENANT_OPEN, UNSET))


def form_access(tags: Sequence[str]) -> str | None:
    """Tags as a form's ``access`` field (``parse_access_field`` reads it back): None for ``UNSET``."""
    wire = wire_access(tags)
    return wire if wire is None or isinstance(wire, str) else ",".join(wire)


def parse_access_field(raw: str | None, *, what: str) -> tuple[str, ...]:
    """A form's ``access`` field (the file upload, the console): ``tenant``, or group names separated by commas
    or spaces; empty or absent for the tenant's default."""
    if raw is None or not raw.strip():
        return (UNSET,)
    text = raw.strip()
    if text == TENANT_WIDE:
        return (TENANT_OPEN,)
    return document_tags([part for part in re.split(r"[,\s]+", text) if part], what=what)
