"""A small synchronous OpenAI-compatible client (httpx) for smoke tests and readiness probes.

    with ApiClient("http://127.0.0.1:8000", api_key=load_api_key(None), timeout=30) as api:
        api.health()                                   # GET /health, raises unless 200
        [m.id for m in api.models()]                   # GET /v1/models
        api.chat("m", [{"role": "user", "content": "hi"}], max_tokens=8)
        collect_stream(api.chat_stream("m", messages, tools=[...], tool_choice="auto"))
        api.completion("m", "hi", max_tokens=1)        # POST /v1/completions

Every call has an explicit timeout (`timeout` seconds for the whole request — a total deadline, not per
read — connect capped at `connect_timeout`), a size cap on the body, on each event-stream line and on the
event count, and refuses redirects: all of it from the one HTTP layer, `vllm_station.api.transport`.
Every failure is an `ApiError` subclass whose message names the request and
what happened. The API key is sent as `Authorization: Bearer …`, is never logged, and is masked in
every error message (a server that echoes it back in an error body cannot leak it through us).
Proxy settings from the environment are ignored (`trust_env=False`): the station's server is local.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from vllm_station import bounded
from vllm_station.api.errors import (
    ApiError,
    ApiKeyError,
    ApiTimeout,
    ApiUnreachable,
    HttpStatusError,
    ProtocolError,
    StreamError,
)
from vllm_station.api.models import ChatChunk, ChatResult, ModelInfo, ToolCall, ToolCallDelta, Usage
from vllm_station.api.sse import excerpt, iter_sse_events
from vllm_station.api.transport import RedirectRefused, Response, SyncHttp, TooLarge
from vllm_station.errors import UsageError
from vllm_station.redact import MIN_SECRET_LEN, redact, register

log = logging.getLogger(__name__)

API_KEY_ENV = "STATION_API_KEY"
# load_api_key without a key file: the first of these that is set ($OPENAI_API_KEY: what OpenAI tools read).
API_KEY_ENVS = (API_KEY_ENV, "OPENAI_API_KEY")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0

Message = Mapping[str, Any]
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _scrubbed(fn: Callable[Concatenate[ApiClient, _P], _R]) -> Callable[Concatenate[ApiClient, _P], _R]:
    """Every ApiError leaving `fn` has the API key and URL credentials removed from its message."""

    @functools.wraps(fn)
    def wrapper(self: ApiClient, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(self, *args, **kwargs)
        except ApiError as err:
            self._scrub(err)
            raise

    return wrapper


def split_base_url(url: str) -> tuple[str, str]:
    """`(root, api_base)` for a server root or an OpenAI `/v1` base URL.

    "http://h:8000", "http://h:8000/", "http://h:8000/v1" and "http://h:8000/v1/" all give
    ("http://h:8000", "http://h:8000/v1"); a path prefix (a gateway) is kept: "http://gw/vllm/v1" gives
    ("http://gw/vllm", "http://gw/vllm/v1"). A URL without a scheme gets "http://".
    """
    text = url.strip()
    if not text:
        raise UsageError("--base-url is empty: give the server URL, e.g. http://127.0.0.1:8000")
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError as exc:  # "http://[::1": an unclosed IPv6 bracket
        raise UsageError(f"--base-url: not a URL ({exc})") from None
    if password is not None:  # first, so that no message below can show it
        register(password)
        if len(password) < MIN_SECRET_LEN:
            raise UsageError(
                f"--base-url: the password in the URL is shorter than {MIN_SECRET_LEN} characters, too short "
                "to be kept out of output"
            )
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"--base-url {url!r}: scheme must be http or https")
    try:
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise UsageError(f"--base-url {url!r}: the port is not a number between 0 and 65535") from None
    if not hostname:
        raise UsageError(f"--base-url {url!r}: no host name")
    if parts.query or parts.fragment:
        raise UsageError(f"--base-url {url!r}: drop the query string / fragment")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    root = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    return root, root + "/v1"


def load_api_key(key_file: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> str | None:
    """The API key, by one rule for every command.

    1. `key_file` (`--api-key-file`): the whole file, surrounding whitespace stripped; the environment
       is not read. A missing, unreadable or empty file is an `ApiKeyError` (exit 2).
    2. else the first of `$STATION_API_KEY`, `$OPENAI_API_KEY` that is set: its value, stripped. Set but
       empty means no key (so `STATION_API_KEY=` keeps an `$OPENAI_API_KEY` from being sent).
    3. else None: no key.

    A key with whitespace, control or non-ASCII characters inside is an `ApiKeyError`. The messages name
    the file or variable, never the key.
    """
    if key_file is not None:
        path = Path(key_file)
        try:
            key = bounded.read_text(path, limit=bounded.KEY_LIMIT).strip()
        except FileNotFoundError:
            raise ApiKeyError(f"API key file {path}: not found (--api-key-file)") from None
        except IsADirectoryError:
            raise ApiKeyError(f"API key file {path}: is a directory (--api-key-file)") from None
        except PermissionError:
            raise ApiKeyError(f"API key file {path}: permission denied (--api-key-file)") from None
        except OSError as exc:
            raise ApiKeyError(f"API key file {path}: cannot read it ({exc.strerror or exc})") from None
        except UnicodeDecodeError:
            raise ApiKeyError(f"API key file {path}: cannot read it (not UTF-8 text)") from None
        origin = f"API key file {path}"
        if not key:
            raise ApiKeyError(f"{origin} is empty")
    else:
        environ = os.environ if env is None else env
        name = next((n for n in API_KEY_ENVS if n in environ), None)
        if name is None:
            return None
        key = environ[name].strip()
        if not key:
            return None
        origin = f"${name}"
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in key) or not key.isascii():
        raise ApiKeyError(f"{origin}: the key contains whitespace, control or non-ASCII characters")
    if len(key) < MIN_SECRET_LEN:
        raise ApiKeyError(
            f"{origin}: the key is shorter than {MIN_SECRET_LEN} characters, too short to be kept out of "
            "output; use a longer one (e.g. `openssl rand -hex 32`)"
        )
    register(key)
    return key


def tls_context(ca_file: str | os.PathLike[str] | None) -> ssl.SSLContext | bool:
    """How https is verified: the system's CAs, or only the CA bundle in `ca_file` (`--ca-file`)."""
    if ca_file is None:
        return True
    path = Path(ca_file)
    try:
        return ssl.create_default_context(cafile=str(path))
    except FileNotFoundError:
        raise UsageError(f"--ca-file {path}: not found") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise UsageError(f"--ca-file {path}: not a PEM CA bundle ({exc.__class__.__name__}: {exc})") from None


def _root_cause(exc: BaseException) -> BaseException:
    seen: set[int] = set()
    cur: BaseException = exc
    while id(cur) not in seen:
        seen.add(id(cur))
        nxt = cur.__cause__ or cur.__context__
        if nxt is None:
            break
        cur = nxt
    return cur


def _error_text(body: str) -> str:
    """The `error.message` (or `message`/`detail`) of a JSON error body, else the body itself."""
    try:
        obj = bounded.loads_json(body)
    except ValueError:
        return body
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(err.get(key), str):
                    return str(err[key])
        if isinstance(err, str):
            return err
        if isinstance(obj.get("detail"), str):
            return str(obj["detail"])
    return body


# What to do about an HTTP status, for operators (also bench's model discovery): `status_hint`.
STATUS_HINTS = {
    403: "the API key was refused: check --api-key-file / STATION_API_KEY",
    404: "wrong base URL or model name? (the server root or its /v1 URL both work)",
}


def status_hint(status: int, *, key_sent: bool) -> str:
    """What to do about `status`; a 401 says whether a key was sent (a wrong key is not a missing one)."""
    if status == 401:
        if key_sent:
            return (
                "the server refused the API key that was sent (from --api-key-file or STATION_API_KEY): "
                "it is not the server's key, or a rotated one"
            )
        return (
            "the server wants an API key and none was sent: pass --api-key-file FILE or set STATION_API_KEY"
        )
    return STATUS_HINTS.get(status, "")


# OpenSSL's reasons when the other end does not speak TLS at all (a plain-http port asked for https)
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"}
)


def _tls_failure(err: ssl.SSLError) -> str:
    """What a failed TLS handshake means, with the fix: a plain-http port, or a certificate not trusted."""
    reason = str(err.reason or "")
    if reason in _NOT_TLS or "wrong version number" in str(err):
        return f"TLS handshake failed ({reason or err}) — that port speaks plain http, not TLS: use http://"
    if isinstance(err, ssl.SSLCertVerificationError) or reason == "CERTIFICATE_VERIFY_FAILED":
        detail = getattr(err, "verify_message", None) or reason
        return (
            f"TLS handshake failed ({detail}) — the certificate is not trusted: "
            "a private CA? pass --ca-file FILE"
        )
    return f"TLS handshake failed ({reason or err})"


class ApiClient:
    """Synchronous OpenAI-compatible client. See the module docstring."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if timeout <= 0:
            raise UsageError(f"--timeout must be positive, got {timeout}")
        self.root_url, self.api_url = split_base_url(base_url)
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self._key = api_key or None
        register(self._key)
        netloc = urlsplit(self.root_url).netloc
        self._userinfo = netloc.rpartition("@")[0] + "@" if "@" in netloc else ""
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        self._http = SyncHttp(headers=headers, verify=tls_context(ca_file), transport=transport)

    def __repr__(self) -> str:  # never the key
        return f"ApiClient({self.root_url!r}, api_key={'set' if self._key else None}, timeout={self.timeout})"

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ---- public calls -------------------------------------------------------------------------

    @_scrubbed
    def health(self, *, timeout: float | None = None) -> float:
        """GET <root>/health; returns the latency in seconds, raises unless the status is 200."""
        t0 = time.perf_counter()
        with self._open("GET", "/health", None, timeout) as op:
            text = op.read_text()
            if op.resp.status_code != 200:
                err = self._status_error(op.where, op.url, op.resp.status_code, text)
                msg = f"{err} (ready means 200)"
                raise HttpStatusError(msg, url=op.url, status=err.status, body=err.body)
        return time.perf_counter() - t0

    @_scrubbed
    def get_json(self, path: str, *, timeout: float | None = None) -> Any:
        """GET a path relative to the server root (e.g. "/version") and decode its JSON body."""
        return self._json("GET", path, None, timeout)[0]

    @_scrubbed
    def post_json(self, path: str, body: Any, *, timeout: float | None = None) -> Any:
        """POST a JSON body to a path relative to the server root (e.g. vLLM's "/tokenize") and decode the
        JSON answer: the same timeouts, error mapping and redaction as every other call."""
        return self._json("POST", path, body, timeout)[0]

    @_scrubbed
    def models(self, *, timeout: float | None = None) -> list[ModelInfo]:
        """GET /v1/models: the served models, in the server's order."""
        obj, _ = self._json("GET", "/v1/models", None, timeout)
        data = obj.get("data") if isinstance(obj, dict) else None
        if not isinstance(data, list):
            raise ProtocolError(
                self._redact(
                    f"GET /v1/models at {self.api_url}/models: no 'data' list in the answer: "
                    f"{excerpt(json.dumps(obj))!r}"
                ),
                url=self.api_url + "/models",
            )
        out: list[ModelInfo] = []
        for item in data:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                raise ProtocolError(
                    f"GET /v1/models: an entry has no string 'id': {excerpt(json.dumps(item))!r}",
                    url=self.api_url + "/models",
                )
            mml = item.get("max_model_len")
            out.append(
                ModelInfo(
                    id=item["id"],
                    max_model_len=mml if isinstance(mml, int) else None,
                    root=item.get("root") if isinstance(item.get("root"), str) else None,
                )
            )
        return out

    @_scrubbed
    def chat(
        self,
        model: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        extra: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> ChatResult:
        """POST /v1/chat/completions (not streamed); the first choice, parsed."""
        body = self._chat_body(model, messages, tools, tool_choice, max_tokens, temperature, seed, extra)
        t0 = time.perf_counter()
        obj, url = self._json("POST", "/v1/chat/completions", body, timeout)
        latency = time.perf_counter() - t0
        where = "POST /v1/chat/completions"
        choice = self._first_choice(obj, where, url)
        message = choice.get("message")
        if not isinstance(message, dict):
            raise ProtocolError(f"{where}: choices[0] has no 'message' object", url=url)
        calls_raw = message.get("tool_calls") or []
        if not isinstance(calls_raw, list):
            raise ProtocolError(f"{where}: message.tool_calls is not a list", url=url)
        calls: list[ToolCall] = []
        for i, c in enumerate(calls_raw):
            if not isinstance(c, dict):
                raise ProtocolError(f"{where}: tool_calls[{i}] is not an object", url=url)
            fn = _obj(c.get("function"))
            args = fn.get("arguments")
            if args is not None and not isinstance(args, str):
                # the OpenAI API sends a JSON-encoded string: a client that json.loads() it breaks on this
                raise ProtocolError(
                    f"{where}: tool_calls[{i}].function.arguments is a JSON {type(args).__name__}, not the "
                    "JSON-encoded string the OpenAI API sends",
                    url=url,
                )
            calls.append(
                ToolCall(
                    index=i,
                    id=_str_or_none(c.get("id")),
                    type=_str_or_none(c.get("type")),
                    name=_str_or_none(fn.get("name")),
                    arguments=args or "",
                )
            )
        return ChatResult(
            content=_str_or_none(message.get("content")),
            reasoning_content=_reasoning(message),
            tool_calls=calls,
            finish_reason=_str_or_none(choice.get("finish_reason")),
            usage=Usage.parse(obj.get("usage")),
            model=_str_or_none(obj.get("model")),
            latency_s=latency,
            raw=obj,
        )

    def chat_stream(
        self,
        model: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        extra: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Iterator[ChatChunk]:
        """POST /v1/chat/completions with `stream: true` (+ usage); yields parsed chunks.

        Raises `StreamError` for a malformed event, an `error` event, or a stream that ends without
        `data: [DONE]`; `ApiTimeout` when the whole stream takes longer than the timeout.
        """
        body = self._chat_body(model, messages, tools, tool_choice, max_tokens, temperature, seed, extra)
        try:
            yield from self._stream(body, timeout)
        except ApiError as err:
            self._scrub(err)
            raise

    def _stream(self, body: dict[str, Any], timeout: float | None) -> Iterator[ChatChunk]:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        where = "POST /v1/chat/completions (stream)"
        t0 = time.perf_counter()
        with self._open("POST", "/v1/chat/completions", body, timeout) as op:
            url = op.url
            if op.resp.status_code >= 300:
                raise self._status_error(where, url, op.resp.status_code, op.read_text())
            ctype = op.resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                text = op.read_text()
                raise StreamError(
                    self._redact(
                        f"{where} at {url}: expected an event stream, got content-type "
                        f"{ctype or 'none'!r}: {excerpt(text)!r}"
                    ),
                    url=url,
                )
            done = False
            events = 0
            try:
                for ev in iter_sse_events(op.lines()):
                    events += 1
                    if ev.data.strip() == "[DONE]":
                        done = True
                        break
                    if not ev.complete:
                        raise StreamError(
                            self._redact(
                                f"{where}: the stream was cut off inside event {events} "
                                f"(line {ev.line}): {excerpt(ev.data)!r}"
                            ),
                            url=url,
                        )
                    yield self._parse_chunk(ev.data, events, ev.line, time.perf_counter() - t0, where, url)
            except StreamError as err:
                if not err.url:
                    err.url = url
                raise
            if not done:
                raise StreamError(
                    f"{where}: the stream ended after {events} event(s) without 'data: [DONE]' (truncated)",
                    url=url,
                )

    @_scrubbed
    def completion(
        self,
        model: str,
        prompt: str,
        *,
        max_tokens: int = 1,
        temperature: float = 0.0,
        timeout: float | None = None,
    ) -> ChatResult:
        """POST /v1/completions (a 1-token probe by default); `content` holds the generated text."""
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature}
        t0 = time.perf_counter()
        obj, url = self._json("POST", "/v1/completions", body, timeout)
        latency = time.perf_counter() - t0
        choice = self._first_choice(obj, "POST /v1/completions", url)
        return ChatResult(
            content=_str_or_none(choice.get("text")),
            reasoning_content=None,
            tool_calls=[],
            finish_reason=_str_or_none(choice.get("finish_reason")),
            usage=Usage.parse(obj.get("usage")),
            model=_str_or_none(obj.get("model")),
            latency_s=latency,
            raw=obj,
        )

    # ---- plumbing -----------------------------------------------------------------------------

    def _scrub(self, err: ApiError) -> None:
        err.args = tuple(self._redact(a) if isinstance(a, str) else a for a in err.args)
        for attr in ("url", "body"):
            value = getattr(err, attr, None)
            if isinstance(value, str):
                setattr(err, attr, self._redact(value))

    def _redact(self, text: str) -> str:
        """`text` without user:password@ of the URL and with every secret masked (`redact`)."""
        if self._userinfo:
            text = text.replace(self._userinfo, "")
        return redact(text)

    def _url(self, path: str) -> str:
        return self.root_url + path

    @staticmethod
    def _chat_body(
        model: str,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: str | Mapping[str, Any] | None,
        max_tokens: int | None,
        temperature: float | None,
        seed: int | None,
        extra: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages]}
        if tools is not None:
            body["tools"] = [dict(t) for t in tools]
        if tool_choice is not None:
            body["tool_choice"] = tool_choice if isinstance(tool_choice, str) else dict(tool_choice)
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        if seed is not None:
            body["seed"] = seed
        if extra:
            body.update(extra)
        return body

    class _Opened:
        """One request through the HTTP layer (`SyncHttp.stream`), with this client's error mapping."""

        def __init__(self, api: ApiClient, method: str, path: str, body: Any, timeout: float | None) -> None:
            self.api, self.method, self.path, self.body = api, method, path, body
            self.total = api.timeout if timeout is None else float(timeout)
            self.url = api._url(path)
            self.where = f"{method} {path}"
            self._stack = contextlib.ExitStack()
            self._resp: Response | None = None

        @property
        def resp(self) -> Response:
            assert self._resp is not None, "use inside `with`"
            return self._resp

        def __enter__(self) -> ApiClient._Opened:
            api = self.api
            log.debug("%s %s (timeout %.1f s)", self.method, self.url, self.total)
            opened = api._http.stream(
                self.method,
                self.url,
                timeout=self.total,
                connect_timeout=api.connect_timeout,
                json_body=self.body,
            )
            try:
                self._resp = self._stack.enter_context(opened)
            except httpx.HTTPError as exc:
                raise api._transport_error(exc, self.where, self.url, self.total) from None
            log.debug("%s %s -> HTTP %d", self.method, self.url, self._resp.status_code)
            return self

        def read_text(self) -> str:
            """The whole body, within the deadline and the body cap."""
            try:
                return self.resp.text()
            except httpx.HTTPError as exc:
                raise self.api._transport_error(exc, self.where, self.url, self.total) from None

        def lines(self) -> Iterator[str]:
            """The body's lines (for event streams), within the deadline and the line and event caps."""
            try:
                yield from self.resp.iter_lines()
            except httpx.RemoteProtocolError as exc:
                raise StreamError(
                    self.api._redact(
                        f"{self.where} at {self.url}: the connection closed mid-stream (truncated: {exc})"
                    ),
                    url=self.url,
                ) from None
            except httpx.HTTPError as exc:
                raise self.api._transport_error(exc, self.where, self.url, self.total) from None

        def __exit__(
            self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
        ) -> None:
            # closing a broken stream may fail again; the first failure is the one reported
            with contextlib.suppress(httpx.HTTPError):
                self._stack.close()

    def _open(self, method: str, path: str, body: Any, timeout: float | None) -> ApiClient._Opened:
        return ApiClient._Opened(self, method, path, body, timeout)

    def _transport_error(self, exc: httpx.HTTPError, where: str, url: str, total: float) -> ApiError:
        root = _root_cause(exc)
        at = f"{where} at {url}"
        if isinstance(exc, RedirectRefused):
            return HttpStatusError(
                self._redact(f"{at}: {exc}"), url=url, status=exc.status, body=self._redact(exc.location)
            )
        if isinstance(exc, TooLarge):
            return ProtocolError(self._redact(f"{at}: {exc} (a misbehaving server?)"), url=url)
        if isinstance(exc, httpx.ConnectTimeout):
            msg = (
                f"{at}: no connection within {min(total, self.connect_timeout):g} s (connect timeout) "
                "— is the host up and the port open?"
            )
            return ApiUnreachable(self._redact(msg), kind="connect-timeout", url=url)
        if isinstance(exc, httpx.TimeoutException):
            return ApiTimeout(
                self._redact(f"{at}: no answer within {total:g} s (timeout; raise --timeout?)"),
                url=url,
                timeout_s=total,
            )
        if isinstance(exc, httpx.ConnectError):
            if isinstance(root, socket.gaierror):
                host = urlsplit(url).hostname
                msg = f"{at}: cannot resolve host {host!r} (DNS: {root.strerror or root})"
                return ApiUnreachable(self._redact(msg), kind="dns", url=url)
            if isinstance(root, ssl.SSLError):
                return ApiUnreachable(self._redact(f"{at}: {_tls_failure(root)}"), kind="tls", url=url)
            if isinstance(root, ConnectionRefusedError):
                msg = f"{at}: connection refused — nothing listens there; is vLLM running on that port?"
                return ApiUnreachable(self._redact(msg), kind="refused", url=url)
            detail = getattr(root, "strerror", None) or str(root) or type(root).__name__
            return ApiUnreachable(self._redact(f"{at}: cannot connect ({detail})"), kind="connect", url=url)
        if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
            detail = str(exc) or type(exc).__name__
            if "illegal status line" in detail:  # another protocol's banner on that port
                msg = f"{at}: no HTTP answer ({excerpt(detail, 120)}) — is that port an HTTP server?"
                return ProtocolError(self._redact(msg), url=url)
            if "without sending a response" in detail:
                msg = (
                    f"{at}: the connection closed before any answer ({detail}) — the server crashed, or "
                    "that port is not an HTTP server?"
                )
                return ProtocolError(self._redact(msg), url=url)
            return ProtocolError(self._redact(f"{at}: the connection broke mid-answer ({detail})"), url=url)
        return ApiError(self._redact(f"{at}: {type(exc).__name__}: {exc}"))

    def _status_error(self, where: str, url: str, status: int, text: str) -> HttpStatusError:
        try:
            phrase = httpx.codes(status).name.replace("_", " ").title()
        except ValueError:
            phrase = ""
        detail = excerpt(_error_text(text), 200) or "(empty body)"
        hint = status_hint(status, key_sent=self._key is not None) or (
            "the server failed: see its log (journalctl -u vllm-station)" if status >= 500 else ""
        )
        msg = f"{where} at {url}: HTTP {status}{' ' + phrase if phrase else ''}: {detail}"
        if hint:
            msg += f" — {hint}"
        return HttpStatusError(
            self._redact(msg), url=url, status=status, body=self._redact(excerpt(text, 500))
        )

    def _json(self, method: str, path: str, body: Any, timeout: float | None) -> tuple[Any, str]:
        where = f"{method} {path}"
        with self._open(method, path, body, timeout) as op:
            text, resp, url = op.read_text(), op.resp, op.url
            if resp.status_code >= 300:
                raise self._status_error(where, url, resp.status_code, text)
            try:
                obj = bounded.loads_json(text)
            except ValueError:
                ctype = resp.headers.get("content-type", "none")
                raise ProtocolError(
                    self._redact(
                        f"{where} at {url}: HTTP {resp.status_code} but the body is not JSON "
                        f"(content-type {ctype}): {excerpt(text) or '(empty body)'!r}"
                    ),
                    url=url,
                ) from None
            return obj, url

    def _first_choice(self, obj: Any, where: str, url: str) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise ProtocolError(f"{where}: the answer is not a JSON object", url=url)
        if "error" in obj and "choices" not in obj:
            raise ProtocolError(
                self._redact(
                    f"{where}: the server returned an error: {excerpt(_error_text(json.dumps(obj)))}"
                ),
                url=url,
            )
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ProtocolError(
                self._redact(f"{where}: no choices in the answer: {excerpt(json.dumps(obj))!r}"), url=url
            )
        first: dict[str, Any] = choices[0]
        return first

    def _parse_chunk(self, data: str, n: int, line: int, elapsed: float, where: str, url: str) -> ChatChunk:
        try:
            obj = bounded.loads_json(data)
        except ValueError:
            raise StreamError(
                self._redact(f"{where}: event {n} (line {line}) is not JSON: {excerpt(data)!r}"), url=url
            ) from None
        if not isinstance(obj, dict):
            raise StreamError(f"{where}: event {n} is not a JSON object: {excerpt(data)!r}", url=url)
        if "error" in obj:
            raise StreamError(
                self._redact(
                    f"{where}: the server sent an error mid-stream: {excerpt(_error_text(data), 200)}"
                ),
                url=url,
            )
        choices = obj.get("choices")
        if not isinstance(choices, list):
            raise StreamError(f"{where}: event {n} has no 'choices' list: {excerpt(data)!r}", url=url)
        usage = Usage.parse(obj.get("usage"))
        if not choices:
            return ChatChunk(None, None, [], None, usage, elapsed, obj)
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            raise StreamError(
                f"{where}: event {n} has no choices[0].delta object: {excerpt(data)!r}", url=url
            )
        deltas: list[ToolCallDelta] = []
        raw_calls = delta.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise StreamError(f"{where}: event {n}: delta.tool_calls is not a list", url=url)
        for i, c in enumerate(raw_calls):
            if not isinstance(c, dict):
                raise StreamError(f"{where}: event {n}: delta.tool_calls[{i}] is not an object", url=url)
            fn = _obj(c.get("function"))
            if fn.get("arguments") is not None and not isinstance(fn.get("arguments"), str):
                raise StreamError(
                    f"{where}: event {n}: delta.tool_calls[{i}].function.arguments is a JSON "
                    f"{type(fn.get('arguments')).__name__}, not the string fragment the OpenAI API sends",
                    url=url,
                )
            idx = c.get("index", i)
            deltas.append(
                ToolCallDelta(
                    index=idx if isinstance(idx, int) else i,
                    id=_str_or_none(c.get("id")),
                    type=_str_or_none(c.get("type")),
                    name=_str_or_none(fn.get("name")),
                    arguments=_str_or_none(fn.get("arguments")),
                )
            )
        return ChatChunk(
            content=_str_or_none(delta.get("content")),
            reasoning_content=_reasoning(delta),
            tool_calls=deltas,
            finish_reason=_str_or_none(choice.get("finish_reason")),
            usage=usage,
            elapsed_s=elapsed,
            raw=obj,
        )


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _reasoning(obj: Mapping[str, Any]) -> str | None:
    # vLLM has used both names ("reasoning_content", then "reasoning").
    return _str_or_none(obj.get("reasoning_content")) or _str_or_none(obj.get("reasoning"))
