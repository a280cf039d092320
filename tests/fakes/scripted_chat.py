"""A scripted chat model, the LLM counterpart of httpx's ``MockTransport``.

Tests inject it into :class:`gateway.providers.llm.LLMClient` in place of ``ChatOpenAI`` so the
real adapter, graph and HTTP code run while the model's answers are decided by the test.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, Field

Responder = Callable[[list[BaseMessage], dict[str, Any]], str]


class ScriptedChatModel(BaseChatModel):
    """Answers with ``responder(messages, bound_kwargs)``; records every call it sees.

    The bound kwargs (``response_format``, ``max_tokens``) are passed through so a responder can
    tell a structured-output call from a free-text one, as a real endpoint would.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    responder: Responder
    calls: list[tuple[list[BaseMessage], dict[str, Any]]] = Field(default_factory=list)
    # Streaming: the connection drops after this many chunks (a mid-stream upstream failure).
    stream_fail_after: int | None = None

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append((list(messages), dict(kwargs)))
        text = self.responder(list(messages), dict(kwargs))
        prompt_chars = sum(len(str(m.content)) for m in messages)
        message = AIMessage(
            content=text,
            usage_metadata={
                "input_tokens": max(1, prompt_chars // 4),
                "output_tokens": max(1, len(text) // 4),
                "total_tokens": max(1, prompt_chars // 4) + max(1, len(text) // 4),
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """Word-sized chunks like a real server's tokens; usage arrives on the last chunk (``stream_usage``)."""
        whole = self._generate(messages, stop, None, **kwargs).generations[0].message
        pieces = re.findall(r"\s*\S+", str(whole.content)) or [""]
        for index, piece in enumerate(pieces):
            if self.stream_fail_after is not None and index >= self.stream_fail_after:
                raise httpx.ReadError("scripted upstream closed the stream")
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
        usage = whole.usage_metadata if isinstance(whole, AIMessage) else None
        yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=usage))


def replies(*texts: str) -> Responder:
    """A responder that returns ``texts`` in order, then repeats the last one."""
    queue: list[str] = list(texts)

    def respond(_: Sequence[BaseMessage], __: dict[str, Any]) -> str:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return respond
