"""The calibration's artefact: one JSON file per key, beside the router's, fitted once and loaded after.

JSON keeps every float bit for bit (Python writes the shortest repr that reads back the same double), so a loaded
calibration equals the fitted one, and the file can be read by an operator.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from routes.calibration.data import load_calibration_set
from routes.calibration.fit import Encoder, Fitted, Guard, fit_calibration
from routes.calibration.model import Calibration, calibration_key

logger = logging.getLogger(__name__)


def artefact_path(cache_dir: Path, fingerprint: str) -> Path:
    safe = "".join(ch if ch.isalnum() else "-" for ch in fingerprint)
    return cache_dir / f"calibration-{calibration_key(fingerprint)}-{safe}.json"


def save(path: Path, fitted: Fitted) -> None:
    """Written to a temporary file of this call's own, then renamed into place (replicas fitting together on an
    empty cache each write a whole file, and a reader sees a whole file or none); readable by all, as the router's:
    the image writes it as root and serves as another user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"calibration": fitted.calibration.to_json(), "report": fitted.report, "seconds": fitted.seconds}
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp.json")
    tmp = Path(name)
    try:
        os.fchmod(handle, 0o644)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(body, out, indent=1)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load(path: Path) -> tuple[Calibration, dict[str, Any]]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return Calibration.from_json(raw["calibration"]), dict(raw.get("report", {}))


def load_or_fit(
    cache_dir: Path, fingerprint: str, encoder: Callable[[], Encoder], guard: Guard
) -> tuple[Calibration, Path]:
    """The calibration for ``fingerprint``: loaded from its artefact, or fitted (``encoder`` is built only then) and
    kept there when the directory is writable (a read-only one still gets a calibrated service)."""
    path = artefact_path(cache_dir, fingerprint)
    if path.is_file():
        try:
            return load(path)[0], path
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("calibration artefact %s unreadable (%s): fitting it again", path, exc)
    logger.info("fitting the calibration for embedder %s (first start for this embedder and data)", fingerprint)
    fitted = fit_calibration(encoder(), load_calibration_set(), fingerprint, guard)
    logger.info("calibration fitted in %.1f s: %s", fitted.seconds, fitted.calibration.thresholds())
    try:
        save(path, fitted)
    except OSError as exc:
        logger.warning("could not keep the calibration at %s: %s", path, exc)
    return fitted.calibration, path
