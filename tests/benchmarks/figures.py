"""Percentiles for the benchmark scripts' printed figures (NaN for an empty sample, never an error)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")
