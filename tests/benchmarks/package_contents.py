"""What ``pip install .`` and the image carry of the project: files and bytes per top-level part.

    python -m tests.benchmarks.package_contents [--source DIR] [--image REF]

The wheel is built (setuptools, no build isolation) from a copy of what the Dockerfile copies out of ``--source`` (a
checkout; this one by default), and its project files are counted by folder (two levels: ``gateway/eval``,
``routes/offline`` and the like stand out). With ``--image`` (a reference ``make image`` printed), the image's root
filesystem and the project's folders in its site-packages are counted too; that needs root and buildah, with the
storage options of ``deploy/build-image.sh --storage``.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path

from tests.wheel_support import PACKAGES, build_wheel

REPO = Path(__file__).resolve().parents[2]


def by_folder(files: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for name, size in files:
        parts = name.split("/")
        key = "/".join(parts[:2]) if len(parts) > 2 else parts[0] + "/"
        counts[key][0] += 1
        counts[key][1] += size
    return {key: (n, size) for key, (n, size) in sorted(counts.items())}


def print_table(title: str, files: list[tuple[str, int]]) -> None:
    print(f"\n{title}: {len(files)} files, {sum(s for _, s in files):,} bytes")
    for folder, (n, size) in by_folder(files).items():
        print(f"  {folder:32s} {n:5d} {size:12,d}")


def image_files(ref: str) -> tuple[list[tuple[str, int]], int]:
    storage = subprocess.run([str(REPO / "deploy" / "build-image.sh"), "--storage"], capture_output=True, text=True)
    options = storage.stdout.split()
    container = subprocess.run(
        ["buildah", *options, "from", ref], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        root = Path(
            subprocess.run(
                ["buildah", *options, "mount", container], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        total = sum((Path(d) / f).lstat().st_size for d, _, names in os.walk(root) for f in names)
        (site,) = root.glob("opt/venv/lib/python3*/site-packages")
        files = [
            (str(p.relative_to(site)), p.stat().st_size)
            for package in PACKAGES
            for p in (site / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
        return files, total
    finally:
        subprocess.run(["buildah", *options, "rm", container], capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=REPO)
    parser.add_argument("--image")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(args.source, Path(tmp))
        infos = [i for i in zipfile.ZipFile(wheel).infolist() if ".dist-info/" not in i.filename]
        print(f"wheel {wheel.name}: {wheel.stat().st_size:,} bytes compressed")
        print_table("the wheel's project files", [(i.filename, i.file_size) for i in infos])
    if args.image:
        files, total = image_files(args.image)
        print(f"\nimage {args.image}: root filesystem {total:,} bytes")
        print_table("the project in the image's site-packages", files)


if __name__ == "__main__":
    main()
