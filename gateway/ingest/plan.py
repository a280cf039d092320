"""What a folder sync has to do: which local files to upload, which are unchanged, which documents to delete.

A file's document id is its path from the folder's parent (``manuals/billing/failed.md`` for ``manuals/``), so two
folders synced to one tenant do not collide and a rerun from anywhere names the same documents. Unchanged means the
same content hash as the gateway holds for that path: the gateway is the record, so a sync interrupted half-way, or
run from another machine, picks up where the tenant is.

Who may read a folder's files is an ``.access`` file in it: ``tenant`` (every reader of the tenant), or group names
separated by commas, spaces or lines (``#`` starts a comment). It applies to the folder and every folder below it
that has no ``.access`` of its own (the nearest one wins, up to the synced root); a file under none gets the
tenant's default. Kept beside the files, it travels with them (copied, versioned, reviewed) where a command-line
mapping would live in whoever's shell ran the last sync. A file whose access changed is sent again even when its
content did not, and the gateway re-tags its chunks without embedding them again. The ``.access`` file itself is
never uploaded (hidden files are skipped).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gateway.errors import ClientError
from gateway.knowledge import SUPPORTED, document_tags, form_access, parse_access_field
from pipelines.shared import UNSET

ACCESS_FILE = ".access"


@dataclass(frozen=True, slots=True)
class LocalFile:
    path: Path
    name: str  # the document id it becomes
    size: int
    sha256: str
    access: tuple[str, ...] = (UNSET,)  # its folder's ``.access`` (the nearest), as tags

    @property
    def access_field(self) -> str | None:
        """The upload form's ``access`` field for this file (None: the tenant's default)."""
        return form_access(self.access)


# A file as the gateway holds it: content hash, its documents, its access tags.
IndexedEntry = tuple[str, list[str], tuple[str, ...]]


@dataclass(slots=True)
class Plan:
    upload: list[LocalFile] = field(default_factory=list)
    unchanged: list[LocalFile] = field(default_factory=list)
    unsupported: list[Path] = field(default_factory=list)
    delete: dict[str, list[str]] = field(default_factory=dict)  # vanished file -> its documents


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class AccessFileError(Exception):
    """An ``.access`` file the sync cannot use: it names an invalid group."""


def _folder_access(folder: Path, stop: Path, cache: dict[Path, tuple[str, ...]]) -> tuple[str, ...]:
    """The nearest ``.access`` at or above ``folder`` (not above ``stop``, the synced root)."""
    if folder in cache:
        return cache[folder]
    marker = folder / ACCESS_FILE
    if marker.is_file():
        found = _read_marker(marker)
    elif folder == stop or folder.parent == folder:
        found = (UNSET,)
    else:
        found = _folder_access(folder.parent, stop, cache)
    cache[folder] = found
    return found


def _read_marker(marker: Path) -> tuple[str, ...]:
    lines = [line.split("#", 1)[0] for line in marker.read_text(encoding="utf-8").splitlines()]
    text = " ".join(part for line in lines for part in line.split())
    try:
        return parse_access_field(text, what=str(marker))
    except ClientError as exc:
        raise AccessFileError(exc.detail) from exc


def walk(roots: Sequence[Path]) -> tuple[list[LocalFile], list[Path], list[str]]:
    """The supported files under ``roots`` (hidden files and folders skipped) with their folders' access, the
    unsupported ones, and the id prefix each root owns (what ``--sync`` may delete under). Raises
    :class:`AccessFileError` for an ``.access`` file naming an invalid group, before anything is uploaded."""
    found: list[LocalFile] = []
    unsupported: list[Path] = []
    prefixes: list[str] = []
    access: dict[Path, tuple[str, ...]] = {}
    for root in roots:
        root = root.resolve()
        base = root.parent
        top = root if root.is_dir() else root.parent
        prefixes.append(PurePosixPath(root.name).as_posix() + ("/" if root.is_dir() else ""))
        candidates: Iterable[Path] = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in candidates:
            relative = path.relative_to(base)
            if not path.is_file() or any(part.startswith(".") for part in relative.parts):
                continue
            if path.suffix.lower() not in SUPPORTED:
                unsupported.append(path)
                continue
            tags = _folder_access(path.parent, top, access)
            found.append(LocalFile(path, relative.as_posix(), path.stat().st_size, _digest(path), tags))
    return found, unsupported, prefixes


def plan(
    local: Sequence[LocalFile],
    unsupported: Sequence[Path],
    prefixes: Sequence[str],
    indexed: Mapping[str, IndexedEntry],
    sync: bool,
) -> Plan:
    """``indexed``: the gateway's files, path -> (content hash, documents, access tags). A file is unchanged when
    both its content and its access are what the gateway holds."""
    result = Plan(unsupported=list(unsupported))
    for file in local:
        held = indexed.get(file.name)
        same = held is not None and held[0] == file.sha256 and tuple(held[2]) == tuple(file.access)
        (result.unchanged if same else result.upload).append(file)
    if sync:
        present = {file.name for file in local}
        for name, (_, documents, _) in sorted(indexed.items()):
            owned = any(name == p or (p.endswith("/") and name.startswith(p)) for p in prefixes)
            if owned and name not in present:
                result.delete[name] = documents
    return result


def held_access(wire: object) -> tuple[str, ...]:
    """The tags of what ``GET /v1/files`` reports as a file's ``access`` (a gateway before permissions: none)."""
    if wire is None or isinstance(wire, str | list):
        try:
            return document_tags(wire)
        except ClientError:  # not something this gateway writes: sent again, and tagged as this sync says
            return (UNSET,)
    return (UNSET,)


def batches(files: Sequence[LocalFile], max_files: int, max_bytes: int) -> list[list[LocalFile]]:
    """Uploads of at most ``max_files`` files and ``max_bytes`` bytes (a larger file goes alone), each of files
    with one access (an upload's ``access`` field is every one of its documents')."""
    out: list[list[LocalFile]] = []
    current: list[LocalFile] = []
    size = 0
    for file in sorted(files, key=lambda f: f.access):
        if current and (len(current) >= max_files or size + file.size > max_bytes or current[0].access != file.access):
            out.append(current)
            current, size = [], 0
        current.append(file)
        size += file.size
    if current:
        out.append(current)
    return out
