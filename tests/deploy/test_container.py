"""deploy/Dockerfile and deploy/entrypoint.sh: what can be checked without a Docker engine."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.chart_tools import CHART, REPO

DOCKERFILE = REPO / "deploy" / "Dockerfile"
ENTRYPOINT = REPO / "deploy" / "entrypoint.sh"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def env_of_final_stage() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in instructions()[final_stage_start() :]:
        if word == "ENV":
            env.update(dict(item.split("=", 1) for item in shlex.split(rest)))
    return env


def final_stage_start() -> int:
    return max(i for i, (word, _) in enumerate(instructions()) if word == "FROM")


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_image_is_multi_stage_on_a_slim_python_that_pyproject_accepts() -> None:
    args = {k: v for word, rest in instructions() if word == "ARG" for k, _, v in [rest.partition("=")]}
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", base), base
    minor = int(base.split(":")[1].split(".")[1].split("-")[0])
    floor = re.fullmatch(r">=3\.(\d+)", pyproject()["project"]["requires-python"])
    assert floor
    assert minor >= int(floor.group(1))
    stages = [rest for word, rest in instructions() if word == "FROM"]
    assert len(stages) >= 2
    assert all(s.startswith("${PYTHON_IMAGE}") for s in stages)


def test_pip_installs_exactly_the_project_without_extras() -> None:
    """The image's package list is pyproject's dependencies: pip installs only ".", no hand-written list."""
    installs = []
    for word, rest in instructions():
        if word == "RUN":
            for command in re.split(r"&&|;", rest):
                argv = shlex.split(command)
                if argv[:2] == ["pip", "install"] or argv[:4] == ["python", "-m", "pip", "install"]:
                    installs.append([a for a in argv[argv.index("install") + 1 :] if not a.startswith("-")])
    assert installs == [["."]]


def test_image_copies_every_package_and_file_the_install_needs() -> None:
    project = pyproject()
    copied = {
        src
        for word, rest in instructions()
        if word == "COPY" and "--from" not in rest
        for src in shlex.split(rest)[:-1]
    }
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied
    assert {"pyproject.toml", project["project"]["readme"]} <= copied


def test_dockerignore_keeps_what_the_build_copies() -> None:
    patterns = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip() and line[0] != "#"
    ]
    needed = ["pyproject.toml", "README.md", "deploy/entrypoint.sh", "routes/data/written_examples.jsonl"]
    needed += [str(p.relative_to(REPO)) for p in (REPO / "gateway").rglob("*.py")][:20]
    for path in needed:
        assert not any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") for p in patterns), path
    for heavy in [".venv", ".git", ".data", "tests"]:
        assert heavy in patterns


def test_runtime_runs_as_the_chart_user_under_tini_without_healthcheck() -> None:
    final = instructions()[final_stage_start() :]
    (user,) = [rest for word, rest in final if word == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert int(uid) == values["podSecurityContext"]["runAsUser"] == values["securityContext"]["runAsUser"]
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]
    assert all(word != "HEALTHCHECK" for word, _ in instructions())
    (entrypoint,) = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert entrypoint.startswith('["/usr/bin/tini", "--"')
    assert any(word == "RUN" and "install" in rest and "tini" in rest for word, rest in final)
    (cmd,) = [rest for word, rest in final if word == "CMD"]
    assert cmd == '["python", "-m", "gateway"]'


def test_runtime_writes_only_under_the_chart_volumes() -> None:
    """HOME, caches and temp files go to /tmp, LanceDB to /data: the chart mounts both, the root is read-only."""
    env = env_of_final_stage()
    for name in ("HOME", "TMPDIR", "XDG_CACHE_HOME"):
        assert env[name] == "/tmp" or env[name].startswith("/tmp/"), name
    assert env["GATEWAY_VECTOR_STORE_PATH"].startswith("/data/")
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert "mountPath: /tmp" in deployment
    assert "mountPath: /data" in deployment
    # The router artefact is trained in the build stage, in the directory the runtime reads it from.
    router_dir = env["GATEWAY_ROUTER_CACHE_DIR"]
    assert any(
        word == "RUN" and f"GATEWAY_ROUTER_CACHE_DIR={router_dir} python -m gateway.query.router_artefact" in rest
        for word, rest in instructions()
    )
    assert any(word == "COPY" and f"{router_dir} {router_dir}" in rest for word, rest in instructions())


# --- the entrypoint script, run for real with stand-in commands -------------------------------------------


def run_entrypoint(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args], env={**base, **env}, capture_output=True, text=True, timeout=30, check=False
    )


def test_entrypoint_execs_the_command_with_its_arguments_and_exit_code(tmp_path: Path) -> None:
    proc = run_entrypoint(tmp_path, "sh", "-c", 'printf "%s|" "$@"; exit 7', "argv0", "a b", "c")
    assert proc.returncode == 7
    assert proc.stdout == "a b|c|"
    assert (tmp_path / "cache").is_dir()


def test_entrypoint_defaults_to_the_gateway(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_python = bin_dir / "python"
    fake_python.write_text('#!/bin/sh\necho "python $*"\n')
    fake_python.chmod(0o755)
    proc = run_entrypoint(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "python -m gateway"


def test_entrypoint_replaces_itself_so_sigterm_reaches_the_server(tmp_path: Path) -> None:
    """exec, not a child: the process tini signals is the server itself, which then shuts down cleanly."""
    server = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (os.write(1, b'drained\\n'), os._exit(0)))\n"
        "print(os.getpid(), flush=True)\n"
        "time.sleep(30)\n"
    )
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with subprocess.Popen(
        ["sh", str(ENTRYPOINT), sys.executable, "-c", server], env=env, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert int(proc.stdout.readline()) == proc.pid
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read().strip() == "drained"


def test_entrypoint_clears_stale_multiprocess_metrics(tmp_path: Path) -> None:
    metrics = tmp_path / "prom"
    metrics.mkdir()
    (metrics / "counter_1234.db").write_bytes(b"stale")
    (metrics / "README").write_text("kept")
    proc = run_entrypoint(tmp_path, "true", PROMETHEUS_MULTIPROC_DIR=str(metrics))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in metrics.iterdir()) == ["README"]


def test_entrypoint_explains_an_unwritable_scratch_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    proc = run_entrypoint(tmp_path, "true", XDG_CACHE_HOME=str(blocker / "cache"))
    assert proc.returncode == 73
    assert "mount a writable volume" in proc.stderr


def test_entrypoint_is_an_executable_sh_script() -> None:
    """The slim image's /bin/sh is dash: the script is plain sh, and every test above ran it with sh."""
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    assert subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=False).returncode == 0
    assert os.access(ENTRYPOINT, os.X_OK)


# --- deploy/build-image.sh's cache key (`make image` reuses an image only while its inputs are unchanged) -


def test_image_cache_key_follows_exactly_what_the_build_copies(tmp_path: Path) -> None:
    """A changed Dockerfile, package file or data file builds anew; tests, the chart and bytecode do not."""
    for name in ("pyproject.toml", "README.md", ".dockerignore"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    for package in ("gateway", "routes", "pipelines", "deploy"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "helm").mkdir()
    (tmp_path / "tests").mkdir()

    def ref() -> str:
        proc = subprocess.run(
            [str(tmp_path / "deploy" / "build-image.sh"), "--ref"],
            env={**os.environ, "RAG_GATEWAY_CACHE": str(tmp_path / "cache")},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    first = ref()
    assert re.fullmatch(r"localhost/rag-gateway:[0-9a-f]{16}", first)
    (tmp_path / "helm" / "values.yaml").write_text("replicaCount: 3\n")
    (tmp_path / "tests" / "test_new.py").write_text("")
    (tmp_path / "gateway" / "__pycache__").mkdir()
    (tmp_path / "gateway" / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0")
    assert ref() == first
    seen = [first]
    for changed in ("routes/data/written_examples.jsonl", "gateway/app.py", "deploy/Dockerfile", "pyproject.toml"):
        with (tmp_path / changed).open("a") as handle:
            handle.write("\n")
        key = ref()
        assert key not in seen, changed
        seen.append(key)
