"""values.schema.json accepts the shipped values and rejects wrong types and unknown keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.deploy.chart_tools import CHART, RenderError, deep_merge, render
from tests.deploy.conftest import KUBE_VERSIONS


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads((CHART / "values.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_default_values_validate(validator: jsonschema.protocols.Validator, default_values: dict[str, Any]) -> None:
    validator.validate(default_values)


def test_every_flag_on_validates(validator: jsonschema.protocols.Validator, all_flags_values: dict[str, Any]) -> None:
    validator.validate(all_flags_values)


def test_schema_describes_every_default_key(
    validator: jsonschema.protocols.Validator, default_values: dict[str, Any]
) -> None:
    assert set(validator.schema["properties"]) == set(default_values)
    assert validator.schema["additionalProperties"] is False


@pytest.mark.parametrize(
    "override",
    [
        {"replicaCount": "two"},
        {"replicaCount": -1},
        {"image": {"tag": 3}},
        {"image": {"pullPolicy": "Sometimes"}},
        {"service": {"port": "http"}},
        {"service": {"port": 70000}},
        {"autoscaling": {"enabled": "yes"}},
        {"autoscaling": {"targetCPUUtilizationPercentage": 150}},
        {"autoscaling": {"minReplica": 2}},  # typo of minReplicas: nested unknown keys fail too
        {"secrets": {"apiKeys": "gw-key"}},
        {"secrets": {"apiKeys": [{"name": "bot", "key": "gw-plaintext-key", "tenant": "acme"}]}},  # keys: digests only
        {"secrets": {"apiKeys": [{"name": "bot", "key_sha256": "abc", "tenant": "acme"}]}},
        {"auth": {"allowOpenAccess": "yes"}},
        {"secrets": {"redisUrl": "localhost:6379"}},
        {"config": {"GATEWAY_LLM_PRICES": {"gpt-4o": 1}}},
        {"resources": {"requests": {"cpu": "lots"}}},
        {"redis": {"maxmemoryPolicy": "lru"}},
        {"llamaCpp": {"modelPath": "model.gguf"}},
        {"podDisruptionBudget": {"maxUnavailable": "half"}},
        {"otel": {"protocol": "grpc"}},  # no gRPC exporter in the gateway: refused, not silently lost
        {"otel": {"protocol": "http/json"}},
    ],
    ids=lambda o: json.dumps(o),
)
def test_wrong_values_are_rejected(
    validator: jsonschema.protocols.Validator, default_values: dict[str, Any], override: dict[str, Any]
) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(deep_merge(default_values, override))


@pytest.mark.parametrize("key", ["replicas", "ingres", "Image"])
def test_unknown_top_level_keys_are_rejected(
    validator: jsonschema.protocols.Validator, default_values: dict[str, Any], key: str
) -> None:
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        validator.validate({**default_values, key: {}})


def test_helm_enforces_the_schema(helm: Path, work: Path, default_values: dict[str, Any]) -> None:
    with pytest.raises(RenderError, match="replicaCount"):
        render(helm, {**default_values, "replicaCount": "two"}, work, KUBE_VERSIONS[-1])
    with pytest.raises(RenderError, match="additional properties"):
        render(helm, {**default_values, "replicas": 3}, work, KUBE_VERSIONS[-1])
