"""What one reader may see of a tenant's knowledge: the groups of the documents they may read.

It lives at the bottom of the import graph because every layer reads it: the gateway learns it from the caller
(an API key acting for a user, a verified token, a trusted header), the caches key answers by it, the vector
stores filter their searches by it, and the pipelines hand it to every retrieval they make.

A chunk carries its document's ``access`` as a list of group names. Two values are reserved:

- ``TENANT_OPEN`` ("*"): open to every reader of the tenant;
- ``UNSET`` ("~"): the document named no access; the tenant's policy decides whether such a document is open
  (then readers see ``UNSET`` as they see ``TENANT_OPEN``) or closed (then only ``Visibility.everything`` sees it),
  so changing that policy re-tags nothing.

Group names never start with either character (the API refuses them), so a reserved value cannot be forged. One
rule (:func:`is_group_name`) names a group wherever one is named, a document's ``access`` and a reader's groups
alike: a reader in a group no document could name would be promised access that nothing can grant.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

TENANT_OPEN = "*"
UNSET = "~"
RESERVED = (TENANT_OPEN, UNSET)
MAX_GROUP_CHARS = 64
# Letters, digits, '_', '-', '.', ':' and '/' ("hr", "eng/platform", "team:sre"); first a letter or digit, so
# neither reserved tag can start one (and a name is safe inside a store's filter expression).
GROUP_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_.:/-]{{0,{MAX_GROUP_CHARS - 1}}}$"
_GROUP_RE = re.compile(GROUP_PATTERN)


def is_group_name(name: object) -> bool:
    """Whether ``name`` may name a group: :data:`GROUP_PATTERN`, for documents' access and readers' groups alike.
    Every place that takes group names from a caller (a document's ``access``, the trusted headers, an evaluation
    suite's ``run_as``) refuses what fails it; a verified token's other groups are left out of what its user sees.
    A user's groups are checked after the gateway's identity layer drops a group path's one leading "/"
    (Keycloak's "/eng/platform" is "eng/platform"); a document's ``access`` names them without it."""
    return isinstance(name, str) and _GROUP_RE.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class Visibility:
    """``groups`` None: sees every document (an admin's console, maintenance). Otherwise the access tags a chunk
    must share one of to be seen: the reader's groups, the tenant-open tag, and ``UNSET`` where the tenant keeps
    documents without access open."""

    groups: frozenset[str] | None

    @classmethod
    def everything(cls) -> Visibility:
        return cls(None)

    @classmethod
    def of(cls, groups: frozenset[str] | set[str] | list[str], *, unset_open: bool) -> Visibility:
        tags = {g for g in groups if is_group_name(g)} | {TENANT_OPEN}
        if unset_open:
            tags.add(UNSET)
        return cls(frozenset(tags))

    @classmethod
    def tenant_only(cls, *, unset_open: bool) -> Visibility:
        """A request with no user: only what is open to the whole tenant."""
        return cls.of(frozenset(), unset_open=unset_open)

    @property
    def unrestricted(self) -> bool:
        return self.groups is None

    def allows(self, access: list[str] | tuple[str, ...] | frozenset[str]) -> bool:
        """Whether a chunk tagged ``access`` is visible (for in-memory structures; stores filter in their search)."""
        return self.groups is None or not self.groups.isdisjoint(access)

    def key(self) -> str:
        """A short, stable digest of what is visible, for cache keys: two readers with the same key see the same
        documents, so one's cached answer can never show the other a word they could not read."""
        if self.groups is None:
            return "all"
        return hashlib.sha256("\x1f".join(sorted(self.groups)).encode()).hexdigest()[:16]
