"""Settings by concern: every documented variable reaches its group, and the answer fingerprint
covers every knob that shapes answers (and nothing else)."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo

from gateway.settings import LOCAL_EMBEDDING_MODELS, ApiKeyConfig, ModelPrice, Settings, SettingsGroup

ROOT = Path(__file__).resolve().parents[2]
# Read by the OpenTelemetry and Prometheus libraries themselves, not by Settings.
LIBRARY_VARIABLES = re.compile(r"^(OTEL_|PROMETHEUS_)")
KEY_SHA256 = "ab" * 32


def env_names(group: type[SettingsGroup], name: str, field: FieldInfo) -> list[str]:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    if isinstance(alias, str):
        return [alias]
    return [f"{group.model_config.get('env_prefix', '')}{name}".upper()]


def settings_variables() -> dict[str, tuple[str, str]]:
    """Every environment variable Settings reads: name -> (group, field)."""
    variables: dict[str, tuple[str, str]] = {}
    for group_name, group_field in Settings.model_fields.items():
        group = group_field.annotation
        assert isinstance(group, type)
        assert issubclass(group, SettingsGroup)
        for name, field in group.model_fields.items():
            for variable in env_names(group, name, field):
                assert variable not in variables, f"{variable} is read by two settings"
                variables[variable] = (group_name, name)
    return variables


def readme_variables() -> set[str]:
    """The names in the README's configuration tables (``_SUFFIX`` shorthands expanded), plus any in the chart
    and deploy files."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        tokens = re.findall(r"`([A-Z_][A-Z0-9_]*)`", row.split(" | ", 1)[0])
        stem = tokens[0].rsplit("_", 1)[0]
        names.update(stem + token if token.startswith("_") else token for token in tokens)
    for folder in ("helm", "deploy"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".yaml", ".tpl", ".txt", ".sh", ".py", ".md", ""}:
                names.update(re.findall(r"\bGATEWAY_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="ignore")))
    return {name for name in names if not LIBRARY_VARIABLES.match(name)}


def sample(group_name: str, name: str) -> tuple[str, Any]:
    """A valid value other than the default, as environment text and as the value it should parse to."""
    field = Settings.model_fields[group_name].annotation.model_fields[name]  # type: ignore[union-attr]
    default = field.get_default(call_default_factory=True)
    annotation = field.annotation
    if get_origin(annotation) in (Union, types.UnionType):  # X | None: sample X
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if annotation is bool:
        return ("false" if default else "true"), not default
    if annotation is int:
        value = 3 if default is None else default + 1  # an optional count (unset: another group's)
        return str(value), value
    if annotation is float:
        value = default / 2 if default else 0.25
        return repr(value), value
    if get_origin(annotation) is Literal:
        other = next(choice for choice in get_args(annotation) if choice != default)
        return other, other
    if (group_name, name) == ("embeddings", "model"):  # the local provider knows its models by name
        other = next(model for model in LOCAL_EMBEDDING_MODELS if model != default)
        return other, other
    if annotation is str:
        return f"sample-{name}", f"sample-{name}"
    if annotation is SecretStr:
        return f"secret-{name}", SecretStr(f"secret-{name}")
    if annotation is Path:
        return f"/tmp/sample-{name}", Path(f"/tmp/sample-{name}")
    if annotation == dict[str, float]:
        return json.dumps({"direct": 1.5}), {"direct": 1.5}
    if annotation == dict[str, ModelPrice]:
        return json.dumps({"m": {"input": 1.0, "output": 2.0}}), {"m": ModelPrice(input=1.0, output=2.0)}
    if get_origin(annotation) is dict and get_origin(get_args(annotation)[1]) is Literal:  # per-tenant policies
        choice = get_args(get_args(annotation)[1])[-1]
        return json.dumps({"acme": choice}), {"acme": choice}
    if annotation == list[str]:
        return json.dumps(["gpt-4o-mini"]), ["gpt-4o-mini"]
    if get_origin(annotation) is list and get_origin(get_args(annotation)[0]) is Literal:  # token algorithms
        choice = next(c for c in get_args(get_args(annotation)[0]) if c not in default)
        return json.dumps([choice]), [choice]
    if annotation == list[ApiKeyConfig]:
        key = {"name": "bot", "key_sha256": KEY_SHA256, "tenant": "acme", "scopes": ["query"]}
        return json.dumps([key]), [ApiKeyConfig.model_validate(key)]
    raise AssertionError(f"no sample value for {group_name}.{name}: {annotation!r}; add one here")


def plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No settings variable of the machine running the tests leaks in."""
    for variable in settings_variables():
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_the_readme_table_is_read() -> None:
    documented = readme_variables()
    # The parser must see the shorthand rows and the provider names, or the next test proves little.
    assert {"GATEWAY_CACHE_SEMANTIC_BITS_PER_BAND", "OPENAI_API_KEY", "REDIS_URL", "GATEWAY_API_KEYS"} <= documented
    assert len(documented) > 70


@pytest.mark.parametrize("variable", sorted(readme_variables()))
def test_every_documented_variable_lands_in_its_group(clean_env: pytest.MonkeyPatch, variable: str) -> None:
    variables = settings_variables()
    assert variable in variables, f"{variable} is documented but no setting reads it"
    group_name, name = variables[variable]
    text, expected = sample(group_name, name)
    clean_env.setenv(variable, text)
    group = getattr(Settings(), group_name)
    assert plain(getattr(group, name)) == plain(expected)
    assert plain(getattr(type(group)(), name)) == plain(expected)  # the group alone reads it too


def test_every_setting_is_documented() -> None:
    documented = readme_variables()
    by_field: dict[tuple[str, str], list[str]] = {}
    for variable, where in settings_variables().items():
        by_field.setdefault(where, []).append(variable)
    undocumented = [where for where, names in by_field.items() if not documented & set(names)]
    assert not undocumented, f"settings missing from the README's table: {undocumented}"


def test_every_group_decides_whether_it_shapes_answers() -> None:
    for group_name, field in Settings.model_fields.items():
        assert isinstance(vars(field.annotation).get("shapes_answers"), bool), group_name


def every_field() -> list[tuple[str, str]]:
    return [
        (group_name, name)
        for group_name, field in Settings.model_fields.items()
        for name in field.annotation.model_fields  # type: ignore[union-attr]
    ]


@pytest.mark.parametrize(("group_name", "name"), every_field())
def test_the_fingerprint_follows_exactly_the_answer_shaping_groups(
    clean_env: pytest.MonkeyPatch, group_name: str, name: str
) -> None:
    settings = Settings()
    _, value = sample(group_name, name)
    changed = settings.replace(**{group_name: {name: value}})
    shapes = type(getattr(settings, group_name)).shapes_answers
    assert (changed.answer_fingerprint() != settings.answer_fingerprint()) is shapes


def test_answer_shaping_groups() -> None:
    """The decision itself, written down once: changing it is a reviewed change of this list."""
    shaping = {name for name, group in Settings().groups().items() if type(group).shapes_answers}
    assert shaping == {
        "llm",
        "embeddings",
        "chunking",
        "router",
        "retrieval",
        "grounding",
        "corrective",
        "guard",
        "assistant",
    }


def test_replace_names_groups_and_fields_that_exist() -> None:
    settings = Settings().replace(cache={"prefix": "before"})
    assert settings.replace(cache={"prefix": "after"}).cache.prefix == "after"
    assert settings.cache.prefix == "before"
    with pytest.raises(ValueError, match="no settings group"):
        settings.replace(caches={"prefix": "x"})
    with pytest.raises(ValueError, match="has no field"):
        settings.replace(cache={"cache_prefix": "x"})
