"""Render the chart (default values and every flag on) and check every object it creates."""

from __future__ import annotations

import ast
import base64
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.settings import Settings
from tests.deploy.chart_tools import CHART, FULLNAME, REPO, RenderError, kinds_and_names, one, pod_spec, render
from tests.deploy.conftest import API_KEY_SHA256, KUBE_VERSIONS, OTEL_COLLECTOR

# Prometheus Operator kinds: kubernetes-validate ships only the built-in API schemas, so these two are
# checked structurally by test_service_monitor_scrapes_the_gateway and test_prometheus_rule_embeds_the_rule_file.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}

DEFAULT_OBJECTS = [
    ("ConfigMap", FULLNAME),
    ("Deployment", FULLNAME),
    ("PodDisruptionBudget", FULLNAME),
    ("Service", FULLNAME),
    ("ServiceAccount", FULLNAME),
]
ALL_FLAG_OBJECTS = sorted(
    [
        *DEFAULT_OBJECTS,
        ("ConfigMap", f"{FULLNAME}-dashboard"),
        ("Deployment", f"{FULLNAME}-llm"),
        ("HorizontalPodAutoscaler", FULLNAME),
        ("Ingress", FULLNAME),
        ("NetworkPolicy", FULLNAME),
        ("NetworkPolicy", f"{FULLNAME}-llm"),
        ("NetworkPolicy", f"{FULLNAME}-redis"),
        ("PrometheusRule", FULLNAME),
        ("Secret", FULLNAME),
        ("Service", f"{FULLNAME}-llm"),
        ("Service", f"{FULLNAME}-redis"),
        ("ServiceMonitor", FULLNAME),
        ("StatefulSet", f"{FULLNAME}-redis"),
    ]
)


@pytest.fixture
def defaults(helm: Path, work: Path, default_values: dict[str, Any]) -> list[dict[str, Any]]:
    return render(helm, default_values, work, KUBE_VERSIONS[-1])


@pytest.fixture
def everything(helm: Path, work: Path, all_flags_values: dict[str, Any]) -> list[dict[str, Any]]:
    return render(helm, all_flags_values, work, KUBE_VERSIONS[-1])


def test_objects_created_with_default_values(defaults: list[dict[str, Any]]) -> None:
    print("\ndefault values:", *(f"{k}/{n}" for k, n in kinds_and_names(defaults)), sep="\n  ")
    assert kinds_and_names(defaults) == DEFAULT_OBJECTS


def test_objects_created_with_every_flag_on(everything: list[dict[str, Any]]) -> None:
    print("\nevery flag on:", *(f"{k}/{n}" for k, n in kinds_and_names(everything)), sep="\n  ")
    assert kinds_and_names(everything) == ALL_FLAG_OBJECTS


def test_all_flags_fixture_switches_on_every_flag(
    default_values: dict[str, Any], all_flags_values: dict[str, Any]
) -> None:
    """A flag added to values.yaml must be added to ALL_FLAGS too, or "every flag on" stops meaning it."""

    def flags(values: dict[str, Any], path: str = "") -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in values.items():
            here = f"{path}.{key}" if path else key
            if isinstance(value, dict):
                found.update(flags(value, here))
            elif key in {"enabled", "create", "multiprocess"}:
                found[here] = value
        return found

    assert flags(default_values), "values.yaml has no flags?"
    assert {path: on for path, on in flags(all_flags_values).items() if on is not True} == {}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("flags", ["default", "all"])
def test_every_object_validates_against_the_kubernetes_schema(
    helm: Path,
    work: Path,
    kube_version: str,
    flags: str,
    default_values: dict[str, Any],
    all_flags_values: dict[str, Any],
) -> None:
    objects = render(helm, default_values if flags == "default" else all_flags_values, work, kube_version)
    checked = []
    for obj in objects:
        if obj["kind"] in OPERATOR_KINDS:
            continue
        # strict: unknown fields (a typo, a field newer than this Kubernetes) fail too
        kubernetes_validate.validate(obj, kube_version, strict=True)
        checked.append(obj["kind"])
    assert len(checked) == len(objects) - sum(o["kind"] in OPERATOR_KINDS for o in objects)
    assert "Deployment" in checked


@pytest.mark.parametrize("flags", ["default", "all"])
def test_every_container_is_locked_down(
    helm: Path, work: Path, flags: str, default_values: dict[str, Any], all_flags_values: dict[str, Any]
) -> None:
    objects = render(helm, default_values if flags == "default" else all_flags_values, work, KUBE_VERSIONS[-1])
    workloads = [o for o in objects if o["kind"] in {"Deployment", "StatefulSet"}]
    assert workloads
    for workload in workloads:
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True, workload["metadata"]["name"]
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False, container["name"]
            assert ctx["readOnlyRootFilesystem"] is True, container["name"]
            assert ctx["capabilities"] == {"drop": ["ALL"]}, container["name"]
            assert ctx.get("privileged", False) is False
            assert container["resources"]["requests"], container["name"]


def test_gateway_pod_runs_non_root_with_writable_mounts_only(defaults: list[dict[str, Any]]) -> None:
    spec = pod_spec(one(defaults, "Deployment"))
    container = spec["containers"][0]
    assert spec["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["runAsUser"] != 0
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    config = one(defaults, "ConfigMap")["data"]
    # The vector store and the image's scratch dirs (HOME, TMPDIR, XDG_CACHE_HOME: /tmp) sit on volumes.
    assert any(config["GATEWAY_VECTOR_STORE_PATH"].startswith(m + "/") for m in mounts)
    assert "/tmp" in mounts


def test_probes_and_graceful_shutdown(defaults: list[dict[str, Any]]) -> None:
    deployment = one(defaults, "Deployment")
    spec = pod_spec(deployment)
    container = spec["containers"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    assert str(port) == one(defaults, "ConfigMap")["data"]["GATEWAY_PORT"]
    # SIGTERM arrives after the preStop sleep; uvicorn then drains for its graceful timeout.
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert spec["terminationGracePeriodSeconds"] > sleep + uvicorn_graceful_timeout()
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def uvicorn_graceful_timeout() -> int:
    tree = ast.parse((REPO / "gateway" / "__main__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "timeout_graceful_shutdown":
            assert isinstance(node.value, ast.Constant)
            return int(node.value.value)
    raise AssertionError("gateway/__main__.py sets no timeout_graceful_shutdown")


def test_replicas_spread_over_zones_and_nodes(defaults: list[dict[str, Any]]) -> None:
    deployment = one(defaults, "Deployment")
    constraints = pod_spec(deployment)["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in constraints} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in constraints)
    assert deployment["spec"]["replicas"] == 2


def test_autoscaler_owns_the_replica_count_and_scales_on_cpu_and_the_custom_metric(
    everything: list[dict[str, Any]],
) -> None:
    assert "replicas" not in one(everything, "Deployment")["spec"]
    hpa = one(everything, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    by_type = {m["type"]: m for m in hpa["metrics"]}
    assert by_type["Resource"]["resource"]["name"] == "cpu"
    assert by_type["Pods"]["pods"]["metric"]["name"] == "gateway_requests_in_flight"


def test_ingress_routes_its_hosts_to_the_service(everything: list[dict[str, Any]]) -> None:
    spec = one(everything, "Ingress")["spec"]
    service = one(everything, "Service")
    assert spec["ingressClassName"] == "nginx"
    assert [rule["host"] for rule in spec["rules"]] == ["gateway.example.com"]
    backend = spec["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert spec["tls"] == [{"secretName": "gateway-tls", "hosts": ["gateway.example.com"]}]


def test_secret_from_values_feeds_the_gateway(
    everything: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = one(everything, "Secret")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["OPENAI_API_KEY"] == "sk-test-openai-0123456789"
    assert data["PINECONE_API_KEY"] == "pc-test-0123456789"
    # The app itself parses what the chart writes: same field names, a digest rather than a key.
    monkeypatch.setenv("GATEWAY_API_KEYS", data["GATEWAY_API_KEYS"])
    keys = Settings().access.api_keys
    assert [(k.name, k.tenant, k.key_sha256, k.requests_per_minute) for k in keys] == [
        ("chatbot", "acme", API_KEY_SHA256, 60)
    ]
    env_from = pod_spec(one(everything, "Deployment"))["containers"][0]["envFrom"]
    assert {"secretRef": {"name": FULLNAME}} in env_from
    # Secret values never land in the ConfigMap.
    config = json.dumps(one(everything, "ConfigMap")["data"])
    assert all(value not in config for value in data.values())


def test_existing_secret_is_referenced_not_created(helm: Path, work: Path, default_values: dict[str, Any]) -> None:
    values = {**default_values, "secrets": {**default_values["secrets"], "existingSecret": "gateway-keys"}}
    objects = render(helm, values, work, KUBE_VERSIONS[-1])
    assert not [o for o in objects if o["kind"] == "Secret"]
    env_from = pod_spec(one(objects, "Deployment"))["containers"][0]["envFrom"]
    assert {"secretRef": {"name": "gateway-keys"}} in env_from


def test_open_access_is_an_explicit_choice(defaults: list[dict[str, Any]], everything: list[dict[str, Any]]) -> None:
    assert "GATEWAY_ALLOW_OPEN_ACCESS" not in one(defaults, "ConfigMap")["data"]
    assert one(everything, "ConfigMap")["data"]["GATEWAY_ALLOW_OPEN_ACCESS"] == "true"


def test_in_cluster_redis_and_llm_are_wired_into_the_settings(everything: list[dict[str, Any]]) -> None:
    config = one(everything, "ConfigMap")["data"]
    redis_port = one(everything, "Service", f"{FULLNAME}-redis")["spec"]["ports"][0]["port"]
    assert config["REDIS_URL"] == f"redis://{FULLNAME}-redis:{redis_port}/0"
    llm_port = one(everything, "Service", f"{FULLNAME}-llm")["spec"]["ports"][0]["port"]
    assert config["GATEWAY_LLM_BASE_URL"] == f"http://{FULLNAME}-llm:{llm_port}/v1"
    llm = pod_spec(one(everything, "Deployment", f"{FULLNAME}-llm"))
    args = llm["containers"][0]["args"]
    assert args[args.index("--alias") + 1] == config["GATEWAY_LLM_MODEL"]
    assert llm["volumes"][0]["persistentVolumeClaim"]["claimName"] == "gguf-models"
    assert config["OTEL_EXPORTER_OTLP_ENDPOINT"] == OTEL_COLLECTOR
    # The multi-process metrics directory is a mounted volume.
    mounts = {m["mountPath"] for m in pod_spec(one(everything, "Deployment"))["containers"][0]["volumeMounts"]}
    assert config["PROMETHEUS_MULTIPROC_DIR"] in mounts


def test_network_policies_admit_only_the_gateway_to_redis_and_the_llm(everything: list[dict[str, Any]]) -> None:
    gateway_labels = one(everything, "Deployment")["spec"]["selector"]["matchLabels"]
    for name in (f"{FULLNAME}-redis", f"{FULLNAME}-llm"):
        policy = one(everything, "NetworkPolicy", name)["spec"]
        assert policy["ingress"][0]["from"] == [{"podSelector": {"matchLabels": gateway_labels}}]


def test_service_monitor_scrapes_the_gateway(everything: list[dict[str, Any]]) -> None:
    monitor = one(everything, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service = one(everything, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in service_ports
        assert endpoint["path"] == "/metrics"


def test_prometheus_rule_embeds_the_rule_file(everything: list[dict[str, Any]]) -> None:
    rule = one(everything, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    for group in rule["spec"]["groups"]:
        assert isinstance(group["name"], str)
        assert group["name"]
        assert group["rules"]
        for r in group["rules"]:
            assert ("alert" in r) != ("record" in r), r
            assert str(r["expr"]).strip(), r


def test_dashboard_config_map_carries_the_dashboard_for_the_sidecar(everything: list[dict[str, Any]]) -> None:
    config_map = one(everything, "ConfigMap", f"{FULLNAME}-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    (name, text), *_ = config_map["data"].items()
    assert name.endswith(".json")
    assert json.loads(text) == json.loads((CHART / "files" / "gateway-dashboard.json").read_text())


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"redis": {"enabled": True}, "secrets": {"redisUrl": "redis://elsewhere:6379/0"}}, "exclusive"),
        ({"llamaCpp": {"enabled": True}}, "existingClaim"),
        ({"terminationGracePeriodSeconds": 30}, "terminationGracePeriodSeconds"),
        ({"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}, "minReplicas"),
        ({"ingress": {"enabled": True}}, "ingress.hosts"),
        ({"otel": {"enabled": True}}, "otel.endpoint"),
        ({"otel": {"enabled": True, "endpoint": "http://otel-collector:4317"}}, "gRPC port"),
    ],
)
def test_contradictory_values_fail_to_render(
    helm: Path, work: Path, default_values: dict[str, Any], override: dict[str, Any], message: str
) -> None:
    from tests.deploy.chart_tools import deep_merge

    with pytest.raises(RenderError, match=message):
        render(helm, deep_merge(default_values, override), work, KUBE_VERSIONS[-1])
