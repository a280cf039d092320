"""What Kubernetes and Prometheus ask of a pod: liveness, readiness and the metrics exposition.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.system.controller import HealthController, MetricsController
from gateway.system.factory import open_readiness

__all__ = ["HealthController", "MetricsController", "open_readiness"]
