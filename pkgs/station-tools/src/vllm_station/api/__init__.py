"""OpenAI-compatible HTTP client shared by `station smoke` and `station wait-ready` (sync, httpx).

Public API::

    from vllm_station.api import ApiClient, load_api_key, collect_stream
    from vllm_station.api import ApiError, ApiUnreachable, ApiTimeout, HttpStatusError, ProtocolError

See `vllm_station.api.client` for the calls and `vllm_station.api.errors` for what each error means.
"""

from vllm_station.api.client import API_KEY_ENV, API_KEY_ENVS, ApiClient, load_api_key, split_base_url
from vllm_station.api.errors import (
    ApiError,
    ApiKeyError,
    ApiTimeout,
    ApiUnreachable,
    HttpStatusError,
    ProtocolError,
    StreamError,
)
from vllm_station.api.models import (
    ChatChunk,
    ChatResult,
    ModelInfo,
    StreamResult,
    ToolCall,
    ToolCallDelta,
    Usage,
    collect_stream,
)
from vllm_station.api.sse import SseEvent, iter_sse_events

__all__ = [
    "API_KEY_ENV",
    "API_KEY_ENVS",
    "ApiClient",
    "ApiError",
    "ApiKeyError",
    "ApiTimeout",
    "ApiUnreachable",
    "ChatChunk",
    "ChatResult",
    "HttpStatusError",
    "ModelInfo",
    "ProtocolError",
    "SseEvent",
    "StreamError",
    "StreamResult",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "collect_stream",
    "iter_sse_events",
    "load_api_key",
    "split_base_url",
]
