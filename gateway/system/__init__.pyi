from .controller import HealthController, MetricsController
from .factory import open_readiness

__all__ = ["HealthController", "MetricsController", "open_readiness"]
