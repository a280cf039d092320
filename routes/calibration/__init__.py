"""Every part of the service that reads a cosine, fitted at set-up for the embedder in use (:mod:`.fit`), kept as an
artefact keyed by the embedder's fingerprint, the calibration data and the fit's version (:mod:`.artefact`)."""

from routes.calibration.model import FIT_VERSION, Calibration, calibration_key

__all__ = ["FIT_VERSION", "Calibration", "calibration_key"]
