"""What a folder sync has to do: which local files to upload, which are unchanged, which documents to delete.

A file's document id is its path from the folder's parent (``manuals/billing/failed.md`` for ``manuals/``), so two
folders synced to one tenant do not collide and a rerun from anywhere names the same documents. Unchanged means the
same content hash as the gateway holds for that path: the gateway is the record, so a sync interrupted half-way, or
run from another machine, picks up where the tenant is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gateway.knowledge.files.formats import SUPPORTED


@dataclass(frozen=True, slots=True)
class LocalFile:
    path: Path
    name: str  # the document id it becomes
    size: int
    sha256: str


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


def walk(roots: Sequence[Path]) -> tuple[list[LocalFile], list[Path], list[str]]:
    """The supported files under ``roots`` (hidden files and folders skipped), the unsupported ones, and the id
    prefix each root owns (what ``--sync`` may delete under)."""
    found: list[LocalFile] = []
    unsupported: list[Path] = []
    prefixes: list[str] = []
    for root in roots:
        root = root.resolve()
        base = root.parent
        prefixes.append(PurePosixPath(root.name).as_posix() + ("/" if root.is_dir() else ""))
        candidates: Iterable[Path] = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in candidates:
            relative = path.relative_to(base)
            if not path.is_file() or any(part.startswith(".") for part in relative.parts):
                continue
            if path.suffix.lower() not in SUPPORTED:
                unsupported.append(path)
                continue
            found.append(LocalFile(path, relative.as_posix(), path.stat().st_size, _digest(path)))
    return found, unsupported, prefixes


def plan(
    local: Sequence[LocalFile],
    unsupported: Sequence[Path],
    prefixes: Sequence[str],
    indexed: Mapping[str, tuple[str, list[str]]],
    sync: bool,
) -> Plan:
    """``indexed``: the gateway's files, path -> (content hash, documents)."""
    result = Plan(unsupported=list(unsupported))
    for file in local:
        held = indexed.get(file.name)
        (result.unchanged if held is not None and held[0] == file.sha256 else result.upload).append(file)
    if sync:
        present = {file.name for file in local}
        for name, (_, documents) in sorted(indexed.items()):
            owned = any(name == p or (p.endswith("/") and name.startswith(p)) for p in prefixes)
            if owned and name not in present:
                result.delete[name] = documents
    return result


def batches(files: Sequence[LocalFile], max_files: int, max_bytes: int) -> list[list[LocalFile]]:
    """Uploads of at most ``max_files`` files and ``max_bytes`` bytes (a larger file goes alone)."""
    out: list[list[LocalFile]] = []
    current: list[LocalFile] = []
    size = 0
    for file in files:
        if current and (len(current) >= max_files or size + file.size > max_bytes):
            out.append(current)
            current, size = [], 0
        current.append(file)
        size += file.size
    if current:
        out.append(current)
    return out
