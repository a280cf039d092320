"""The project's package import graph: cross-package imports, cycles, and imports into another package's modules.

    python -m tests.benchmarks.import_graph [--root DIR]

Reads every module of ``gateway``, ``routes`` and ``pipelines`` under ``--root`` (a checkout; this one by default)
and counts every import at any depth of a module (lazy and type-checking ones included) between packages:
``gateway.<package>``, ``routes.<module or package>`` and ``pipelines.<package>``. The rules themselves are
import-linter's contracts in pyproject.toml (``lint-imports``); this prints what a before-and-after needs: how many
imports reach into another package's modules rather than its ``__init__``, and the package graph's cycles (its
strongly connected groups, and the pairs that import each other).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

TOPS = ("gateway", "routes", "pipelines")


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path) -> list[tuple[str, str]]:
    """(importing module, imported module) for every import of a project module, relative ones resolved."""
    found = []
    for top in TOPS:
        for path in (root / top).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            module = module_name(root, path)
            base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found += [(module, alias.name) for alias in node.names if alias.name.split(".")[0] in TOPS]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
                    else:
                        target = node.module or ""
                    if target.split(".")[0] in TOPS:
                        found.append((module, target))
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one package."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    root = parser.parse_args().root
    edges: dict[str, set[str]] = defaultdict(set)
    cross = deep = 0
    for importer, imported in imports(root):
        source, target = package_of(importer), package_of(imported)
        if source == target or source.startswith(target + ".") or target.startswith(source + "."):
            continue
        cross += 1
        deep += imported != target and (root / target.replace(".", "/")).is_dir()
        edges[source].add(target)
    print(f"cross-package import statements: {cross}, into another package's modules: {deep}")
    groups = cycles(edges)
    print(f"strongly connected groups: {len(groups)}")
    for group in groups:
        print(f"  {len(group)} packages: {', '.join(group)}")
    pairs = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, set())})
    print(f"pairs that import each other: {len(pairs)}")
    for a, b in pairs:
        print(f"  {a} <-> {b}")


if __name__ == "__main__":
    main()
