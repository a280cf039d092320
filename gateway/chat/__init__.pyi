from .controller import ChatController
from .service import ChatService

__all__ = ["ChatController", "ChatService"]
