"""The OpenAI-compatible chat API: wire types, follow-up handling, streaming, OpenAI error bodies.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.chat.controller import ChatController
from gateway.chat.service import ChatService

__all__ = ["ChatController", "ChatService"]
