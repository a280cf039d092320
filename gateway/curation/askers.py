"""Who asked an answer and what they could see, and whom an evaluation suite asks as.

An answer is recorded with its reader's user id (None: the request named no user) and the visibility it ran under:
``Visibility.key()`` to compare and filter by, and the visible access tags themselves, so a resolution can re-run the
question in exactly the view it was asked in (not the asker's view as the identity provider would give it today, nor
everything, which would prove a fix the asker cannot see). Records from before readers were known carry neither and
read as the tenant-open visibility: the least any reader of the tenant sees.

An evaluation suite may name ``run_as``, a user id and groups: its runs ask every case as that reader, built by the
identity module (:meth:`gateway.access.identity.Identity.of`) so the tenant's policy for documents without access
applies as it does to a real request. Without it a suite asks as nobody (tenant-open only). Its groups are read as the
identity module reads a user's (:func:`gateway.access.identity.user_group`: a group path's leading "/" dropped) and
refused as it refuses them in trusted headers, here as a 422.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.access import MAX_GROUPS, MAX_USER_ID_CHARS, Identity, Reader, ReaderSource, user_group
from gateway.errors import InvalidReaderError
from pipelines.shared import MAX_GROUP_CHARS, Visibility, is_group_name

_SOURCES: dict[str, ReaderSource] = {"token": "token", "header": "header", "none": "none"}


@dataclass(frozen=True, slots=True)
class Asker:
    """Who asked one answer, as stored. ``visibility_key`` None: recorded before readers were known."""

    user_id: str | None = None
    visibility_key: str | None = None
    visible_tags: tuple[str, ...] | None = None  # None with a key: unrestricted (everything)
    source: str | None = None

    @classmethod
    def of(cls, reader: Reader | None) -> Asker:
        """The asker of an answer given to ``reader`` (None: an in-process caller naming nobody, stored as unknown,
        hence read as tenant-open)."""
        if reader is None:
            return cls()
        groups = reader.visibility.groups
        return cls(
            user_id=reader.user_id,
            visibility_key=reader.visibility.key(),
            visible_tags=None if groups is None else tuple(sorted(groups)),
            source=reader.source,
        )

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Asker:
        tags = row.get("visible_tags")
        return cls(
            user_id=row.get("user_id"),
            visibility_key=row.get("visibility_key"),
            visible_tags=None if tags is None else tuple(tags),
            source=row.get("reader_source"),
        )

    @property
    def known(self) -> bool:
        return self.visibility_key is not None

    def visibility(self, tenant_open: Visibility) -> Visibility:
        """The visibility the answer ran under; ``tenant_open`` for one recorded before readers were known."""
        if not self.known:
            return tenant_open
        if self.visible_tags is None:
            return Visibility.everything()
        return Visibility(frozenset(self.visible_tags))

    def key(self, tenant_open: Visibility) -> str:
        return self.visibility(tenant_open).key()

    def reader(self, nobody: Reader) -> Reader:
        """A reader seeing exactly what the asker saw: the recorded tags, not the asker's groups looked up again.
        ``nobody``: the identity module's reader of no user, whose tenant-open view stands for unknown askers."""
        if not self.known:
            return nobody
        visibility = self.visibility(nobody.visibility)
        groups = frozenset(tag for tag in visibility.groups or () if is_group_name(tag))
        return Reader(self.user_id, groups, visibility, _SOURCES.get(self.source or "", "none"))

    def columns(self) -> dict[str, Any]:
        """The answer record's columns for it (feedback keeps the first three)."""
        return {
            "user_id": self.user_id,
            "visibility_key": self.visibility_key,
            "visible_tags": None if self.visible_tags is None else list(self.visible_tags),
            "reader_source": self.source,
        }


@dataclass(frozen=True, slots=True)
class RunAs:
    """The user an evaluation suite asks its cases as."""

    user_id: str
    groups: tuple[str, ...]  # sorted, distinct

    def stored(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "groups": list(self.groups)}

    @classmethod
    def from_stored(cls, value: Mapping[str, Any] | None) -> RunAs | None:
        if not value:
            return None
        return cls(str(value["user_id"]), tuple(sorted(value.get("groups") or ())))

    def reader(self, identity: Identity) -> Reader:
        """The reader the identity module makes of this user, as of one named by a trusted caller's word (an admin's
        suite settings): its visibility follows the tenant's policy for documents without access, as a request's."""
        return identity.of(self.user_id, frozenset(self.groups), "header")


def run_as(user_id: str, groups: Sequence[str]) -> RunAs:
    """A suite's ``run_as`` as an admin sent it, checked as the identity module checks a named user and their groups
    (a Keycloak group path such as "/eng/platform" is the group "eng/platform"): a reserved group name ("*", "~"
    first: the tenant-open and unset tags) is refused, not dropped, so an admin who meant it learns that no group
    can be named so (422)."""
    user = user_id.strip()
    if not user or len(user) > MAX_USER_ID_CHARS:
        raise InvalidReaderError(
            f"run_as.user_id must name a user id of 1 to {MAX_USER_ID_CHARS} characters.", field="run_as.user_id"
        )
    names = [name.strip() for name in groups]
    if len(names) > MAX_GROUPS:
        raise InvalidReaderError(
            f"run_as.groups names {len(names)} groups; at most {MAX_GROUPS}.", field="run_as.groups"
        )
    named: set[str] = set()
    for name in names:
        group = user_group(name)
        if group is None:
            raise InvalidReaderError(
                f"run_as.groups: {name[:40]!r} is not a group name (1 to {MAX_GROUP_CHARS} letters, digits, '_', '-', "
                "'.', ':' or '/', starting with a letter or a digit, after a group path's one leading '/'; '*' and "
                "'~' are the reserved access tags).",
                field="run_as.groups",
            )
        named.add(group)
    return RunAs(user, tuple(sorted(named)))


@dataclass(frozen=True, slots=True)
class AskedBy:
    """An admin's filter of curation records by who asked them: a user id, a visibility key (``Visibility.key()``),
    or both, all of which must hold. Records from before readers were known match the tenant-open key, no user."""

    user_id: str | None = None
    visibility_key: str | None = None

    @classmethod
    def of(cls, user_id: str | None, visibility_key: str | None) -> AskedBy | None:
        """The filter of a request's parameters; None when they name nothing to filter by."""
        return None if user_id is None and visibility_key is None else cls(user_id, visibility_key)

    def matches(self, asker: Asker, tenant_open: Visibility) -> bool:
        return self._holds(asker.user_id, asker.key(tenant_open))

    def matches_row(self, row: Mapping[str, Any]) -> bool:
        """A training pair's row (its ``user_id`` and ``visibility``)."""
        return self._holds(row.get("user_id"), row.get("visibility"))

    def _holds(self, user_id: str | None, visibility_key: str | None) -> bool:
        if self.user_id is not None and user_id != self.user_id:
            return False
        return self.visibility_key is None or visibility_key == self.visibility_key
