"""The web console: sign-in, the playground, the knowledge base and the review page, server-rendered.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.console.controller import console_router, template_config

__all__ = ["console_router", "template_config"]
