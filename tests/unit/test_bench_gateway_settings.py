"""The benchmark's ``--gateway-env``: ``{upstream}`` becomes the fake upstream's URL, known only once it is up."""

from __future__ import annotations

import argparse

import pytest

from tests.benchmarks.miss_vs_litellm import add_one_gateway_arguments, gateway_settings

UPSTREAM = "http://127.0.0.1:40123/v1"


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_one_gateway_arguments(parser, rounds=1)
    return parser.parse_args(list(argv))


def test_a_remote_embedder_is_pointed_at_the_fake_upstream() -> None:
    args = parsed(
        "--gateway-env",
        "GATEWAY_EMBEDDING_PROVIDER=openai",
        "GATEWAY_EMBEDDING_BASE_URL={upstream}",
        "GATEWAY_EMBEDDING_MODEL=fake-embed",
    )
    assert gateway_settings(args, UPSTREAM) == {
        "GATEWAY_EMBEDDING_PROVIDER": "openai",
        "GATEWAY_EMBEDDING_BASE_URL": UPSTREAM,
        "GATEWAY_EMBEDDING_MODEL": "fake-embed",
    }


def test_without_settings_the_gateway_runs_on_its_defaults() -> None:
    assert gateway_settings(parsed(), UPSTREAM) == {}


def test_a_setting_without_a_value_is_refused() -> None:
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        gateway_settings(parsed("--gateway-env", "GATEWAY_EMBEDDING_PROVIDER"), UPSTREAM)
