from .service import Guardrails, ScreenedRetriever, ScreenedSearch
from .vault import Vault

__all__ = ["Guardrails", "ScreenedRetriever", "ScreenedSearch", "Vault"]
