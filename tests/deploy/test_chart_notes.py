"""NOTES.txt tells the user how to reach the service and never prints a secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.deploy.chart_tools import NAMESPACE, RELEASE, deep_merge, render_notes
from tests.deploy.conftest import API_KEY_SHA256

SECRETS = ("sk-test-openai-0123456789", "pc-test-0123456789", "tvly-test-0123456789", API_KEY_SHA256)


def test_notes_tell_how_to_reach_the_service(helm: Path, work: Path, default_values: dict[str, Any]) -> None:
    notes = render_notes(helm, default_values, work)
    assert f"kubectl port-forward -n {NAMESPACE} svc/{RELEASE}-rag-gateway" in notes
    assert f"{RELEASE}-rag-gateway.{NAMESPACE}.svc.cluster.local" in notes
    assert "WARNING: no Redis" in notes  # defaults have neither Redis nor Pinecone configured
    assert "WARNING: no client API keys" in notes  # nor client keys: the pods would refuse to start open


def test_notes_stay_quiet_about_keys_once_open_access_is_chosen(
    helm: Path, work: Path, default_values: dict[str, Any]
) -> None:
    notes = render_notes(helm, deep_merge(default_values, {"auth": {"allowOpenAccess": True}}), work)
    assert "WARNING: no client API keys" not in notes


def test_notes_for_a_load_balancer(helm: Path, work: Path, default_values: dict[str, Any]) -> None:
    notes = render_notes(helm, deep_merge(default_values, {"service": {"type": "LoadBalancer"}}), work)
    assert "status.loadBalancer.ingress" in notes


def test_notes_name_the_ingress_hosts(helm: Path, work: Path, all_flags_values: dict[str, Any]) -> None:
    assert "https://gateway.example.com/" in render_notes(helm, all_flags_values, work)


def test_notes_never_print_secrets(helm: Path, work: Path, all_flags_values: dict[str, Any]) -> None:
    notes = render_notes(helm, all_flags_values, work)
    assert "values are not shown" in notes
    for secret in SECRETS:
        assert secret not in notes
