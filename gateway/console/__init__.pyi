from .controller import console_router, template_config

__all__ = ["console_router", "template_config"]
