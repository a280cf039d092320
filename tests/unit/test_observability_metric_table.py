"""The metric table and GatewayMetrics' typed attributes describe the same metrics.

The attributes are what callers and mypy see, the table is what gets created: a row without its
attribute (or with another type) would be a metric mypy cannot check, an attribute without its row
one that fails at the first use. The dashboard and alert rules are checked against the exposition
in test_observability_deploy.py.
"""

from __future__ import annotations

from typing import get_type_hints

import pytest
from prometheus_client import Counter, Gauge, Histogram

from gateway.observability.metrics import METRICS, GatewayMetrics, GaugeMode, MetricSpec
from tests.unit.observability_support import parse_exposition
from tests.unit.promql import base_name


def test_every_row_has_its_typed_attribute_and_every_attribute_its_row() -> None:
    rows = {spec.attribute: spec.kind for spec in METRICS}
    assert len(rows) == len(METRICS), "two rows share an attribute"
    assert len({spec.name for spec in METRICS}) == len(METRICS), "two rows share a metric name"
    assert rows == get_type_hints(GatewayMetrics)


def test_each_attribute_holds_the_metric_its_row_declares() -> None:
    metrics = GatewayMetrics()
    for spec in METRICS:
        assert isinstance(getattr(metrics, spec.attribute), spec.kind), spec.attribute
    _, exported = parse_exposition(metrics.exposition().decode())
    assert {spec.name for spec in METRICS} <= {base_name(name) for name in exported}


@pytest.mark.parametrize(
    ("kind", "buckets", "mode"),
    [
        (Histogram, None, None),
        (Counter, (1.0,), None),
        (Gauge, None, None),
        (Counter, None, "max"),
        (Histogram, (1.0,), "max"),
    ],
)
def test_a_row_states_exactly_what_its_kind_needs(
    kind: type[Counter] | type[Gauge] | type[Histogram], buckets: tuple[float, ...] | None, mode: GaugeMode | None
) -> None:
    with pytest.raises(ValueError, match="gateway_x"):
        MetricSpec("x", kind, "gateway_x", "help", buckets=buckets, multiprocess_mode=mode)
