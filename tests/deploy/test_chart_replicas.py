"""Replicas never split or lose documents: the embedded store lives on a claim, and more than one replica
renders only with a store every replica shares (Pinecone or a ReadWriteMany claim) and a shared Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.chart_tools import FULLNAME, RenderError, deep_merge, one, pod_spec, render, render_notes
from tests.deploy.conftest import KUBE_VERSIONS

REDIS = {"redis": {"enabled": True}}
PINECONE = {"secrets": {"pineconeApiKey": "pc-test-0123456789"}}
RWX_CLAIM = {"vectorStore": {"existingClaim": "shared-lancedb", "existingClaimAccessMode": "ReadWriteMany"}}


def rendered(
    helm: Path, work: Path, default_values: dict[str, Any], *overrides: dict[str, Any]
) -> list[dict[str, Any]]:
    values = default_values
    for override in overrides:
        values = deep_merge(values, override)
    objects = render(helm, values, work, KUBE_VERSIONS[-1])
    for obj in objects:
        kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)
    return objects


def data_volume(objects: list[dict[str, Any]]) -> dict[str, Any]:
    volumes = {v["name"]: v for v in pod_spec(one(objects, "Deployment"))["volumes"]}
    return volumes["data"]


def test_defaults_run_one_replica_on_a_claim_the_chart_creates_and_keeps(
    helm: Path, work: Path, default_values: dict[str, Any]
) -> None:
    objects = rendered(helm, work, default_values)
    deployment = one(objects, "Deployment")
    claim = one(objects, "PersistentVolumeClaim", f"{FULLNAME}-data")
    assert deployment["spec"]["replicas"] == 1
    assert data_volume(objects)["persistentVolumeClaim"] == {"claimName": f"{FULLNAME}-data"}
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"  # documents outlive the release
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # one pod at a time on a ReadWriteOnce claim


def test_the_claim_size_and_class_are_configurable(helm: Path, work: Path, default_values: dict[str, Any]) -> None:
    persistence = {"vectorStore": {"persistence": {"size": "50Gi", "storageClassName": "fast-ssd"}}}
    claim = one(rendered(helm, work, default_values, persistence), "PersistentVolumeClaim", f"{FULLNAME}-data")
    assert (claim["spec"]["resources"]["requests"]["storage"], claim["spec"]["storageClassName"]) == (
        "50Gi",
        "fast-ssd",
    )


def test_an_existing_claim_is_mounted_and_none_is_created(
    helm: Path, work: Path, default_values: dict[str, Any]
) -> None:
    objects = rendered(helm, work, default_values, {"vectorStore": {"existingClaim": "my-lancedb"}})
    assert data_volume(objects)["persistentVolumeClaim"] == {"claimName": "my-lancedb"}
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]


@pytest.mark.parametrize(
    "scale",
    [{"replicaCount": 2}, {"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3}}],
    ids=["replicaCount", "autoscaling"],
)
@pytest.mark.parametrize(
    "store",
    [{}, {"vectorStore": {"existingClaim": "my-lancedb"}}, {"vectorStore": {"provider": "lancedb"}}],
    ids=["chart-claim", "existing-rwo-claim", "explicit-lancedb"],
)
def test_several_replicas_on_an_unshared_embedded_store_refuse_to_render(
    helm: Path, work: Path, default_values: dict[str, Any], scale: dict[str, Any], store: dict[str, Any]
) -> None:
    with pytest.raises(RenderError, match="replicas on the embedded LanceDB store would split documents") as refused:
        render(helm, deep_merge(deep_merge(deep_merge(default_values, scale), store), REDIS), work, KUBE_VERSIONS[-1])
    assert "ReadWriteMany" in str(refused.value)
    assert "Pinecone" in str(refused.value)


def test_two_replicas_on_a_read_write_many_existing_claim_render(
    helm: Path, work: Path, default_values: dict[str, Any]
) -> None:
    objects = rendered(helm, work, default_values, {"replicaCount": 2}, RWX_CLAIM, REDIS)
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert data_volume(objects)["persistentVolumeClaim"] == {"claimName": "shared-lancedb"}
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"


def test_two_replicas_on_a_read_write_many_chart_claim_render(
    helm: Path, work: Path, default_values: dict[str, Any]
) -> None:
    rwx = {"vectorStore": {"persistence": {"accessMode": "ReadWriteMany"}}}
    objects = rendered(helm, work, default_values, {"replicaCount": 2}, rwx, REDIS)
    assert one(objects, "PersistentVolumeClaim", f"{FULLNAME}-data")["spec"]["accessModes"] == ["ReadWriteMany"]
    assert one(objects, "Deployment")["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    "pinecone",
    [PINECONE, {"vectorStore": {"provider": "pinecone"}, "secrets": {"existingSecret": "gateway-keys"}}],
    ids=["key-in-values", "key-in-existing-secret"],
)
def test_two_replicas_on_pinecone_render_without_a_claim(
    helm: Path, work: Path, default_values: dict[str, Any], pinecone: dict[str, Any]
) -> None:
    objects = rendered(helm, work, default_values, {"replicaCount": 2}, pinecone, REDIS)
    assert one(objects, "Deployment")["spec"]["replicas"] == 2
    assert "emptyDir" in data_volume(objects)
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]


def test_several_replicas_with_the_cache_and_no_redis_refuse_to_render(
    helm: Path, work: Path, default_values: dict[str, Any]
) -> None:
    values = deep_merge(deep_merge(default_values, {"replicaCount": 2}), PINECONE)
    with pytest.raises(RenderError, match="need a shared Redis"):
        render(helm, values, work, KUBE_VERSIONS[-1])
    no_cache = deep_merge(values, {"config": {"GATEWAY_CACHE_ENABLED": "false"}})
    assert one(render(helm, no_cache, work, KUBE_VERSIONS[-1]), "Deployment")["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"vectorStore": {"provider": "lancedb"}, **PINECONE}, "exclusive"),
        ({"vectorStore": {"provider": "pinecone"}}, "needs PINECONE_API_KEY"),
    ],
)
def test_a_store_choice_that_contradicts_the_keys_refuses_to_render(
    helm: Path, work: Path, default_values: dict[str, Any], override: dict[str, Any], message: str
) -> None:
    with pytest.raises(RenderError, match=message):
        render(helm, deep_merge(default_values, override), work, KUBE_VERSIONS[-1])


def test_notes_say_how_to_scale(helm: Path, work: Path, default_values: dict[str, Any]) -> None:
    notes = render_notes(helm, default_values, work)
    assert "PersistentVolumeClaim" in notes
    assert all(word in notes for word in ("ReadWriteMany", "Pinecone", "REDIS_URL"))
