"""``python -m gateway.ingest PATH… --tenant T [--url URL] [--key KEY] [--sync]``: folders to a tenant.

Walks the folders, asks the gateway which files it already holds (by path and content hash), uploads the new and
changed ones in batches through ``POST /v1/files``, and with ``--sync`` deletes the documents of files that are
gone (only under the folders given). Progress shows files, chunks, rate and time left; the summary lists every
refused file and why. Interrupted, it stops after the batch in flight; run it again and it skips what landed.
Who may read a folder's files is its ``.access`` file (``tenant``, or group names; see :mod:`gateway.ingest.plan`).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from gateway.ingest.client import GatewayFiles, IngestError, Outcome
from gateway.ingest.plan import AccessFileError, Plan, batches, plan, walk

DEFAULT_URL = "http://127.0.0.1:8000"
BATCH_FILES = 16
BATCH_BYTES = 16 * 1024 * 1024  # well under the gateway's default 64 MB upload limit


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gateway.ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="folders or files to ingest")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--url", default=os.environ.get("GATEWAY_URL", DEFAULT_URL), help="the gateway (GATEWAY_URL)")
    parser.add_argument("--key", default=os.environ.get("GATEWAY_API_KEY"), help="an admin key (GATEWAY_API_KEY)")
    parser.add_argument("--sync", action="store_true", help="delete documents whose files are gone")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        parser.error(f"no such file or folder: {', '.join(missing)}")
    return args


def _run(gateway: GatewayFiles, work: Plan, console: Console) -> tuple[list[Outcome], int, int | None]:
    """Upload and delete as planned: the outcomes, the documents deleted, and the last knowledge version."""
    outcomes: list[Outcome] = []
    version: int | None = None
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[chunks]} chunks · {task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    started = time.monotonic()
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("files", total=len(work.upload), chunks=0, rate="–")
        chunks = 0
        for batch in batches(work.upload, BATCH_FILES, BATCH_BYTES):
            results, landed = gateway.upload(batch)
            outcomes.extend(results)
            version = landed if landed is not None else version
            chunks += sum(o.chunks for o in results)
            elapsed = max(time.monotonic() - started, 1e-6)
            rate = f"{len(outcomes) / elapsed:.1f} files/s, {chunks / elapsed:.0f} chunks/s"
            progress.update(task, advance=len(batch), chunks=chunks, rate=rate)
        deleted = 0
        for documents in work.delete.values():
            for document in documents:
                gateway.delete(document)
                deleted += 1
    return outcomes, deleted, version


def _summary(work: Plan, outcomes: list[Outcome], deleted: int, version: int | None, seconds: float) -> list[str]:
    indexed = [o for o in outcomes if o.status == 200]
    refused = [o for o in outcomes if o.status != 200]
    lines = [
        f"{len(indexed)} files indexed ({sum(o.chunks for o in indexed)} chunks), {len(work.unchanged)} unchanged, "
        f"{deleted} documents deleted, {len(refused)} refused, {len(work.unsupported)} skipped (unsupported type) "
        f"in {seconds:.1f} s" + (f"; knowledge version {version}" if version is not None else "")
    ]
    lines += [f"  refused {o.file}: {o.status} {o.reason}" for o in refused]
    lines += [f"  skipped {path}" for path in work.unsupported]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    console = Console(stderr=True)
    started = time.monotonic()
    try:
        local, unsupported, prefixes = walk(args.paths)
    except AccessFileError as exc:
        console.print(f"[red]stopped before uploading anything: {exc}[/red]")
        return 1
    gateway = GatewayFiles(args.url, args.key, args.tenant)
    outcomes: list[Outcome] = []
    work = Plan()
    try:
        work = plan(local, unsupported, prefixes, gateway.indexed(), args.sync)
        outcomes, deleted, version = _run(gateway, work, console)
    except IngestError as exc:
        console.print(f"[red]stopped: {exc}[/red]")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: what was uploaded stays; run the same command again to go on[/yellow]")
        return 130
    finally:
        gateway.close()
    for line in _summary(work, outcomes, deleted, version, time.monotonic() - started):
        print(line)
    return 0 if all(o.status == 200 for o in outcomes) else 2
