"""The hot-path HTTP/1.1 client: framing (chunked, Content-Length) split at every byte, keep-alive reuse,
stale-connection retry, timeouts and refused connections — against real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from vllm_station.commands.bench.wire import RawResult, WireClient, _Conn

SSE = b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in SSE)
    + b"0\r\n\r\n"
)


def _feed_all(response: bytes, pieces: list[bytes]) -> tuple[RawResult, bool]:
    loop = asyncio.new_event_loop()
    try:
        conn = _Conn()
        res = RawResult(index=0, t_sched=0.0)
        done: asyncio.Future[None] = loop.create_future()
        conn.begin(res, done)
        for p in pieces:
            conn.data_received(p)
        return res, done.done()
    finally:
        loop.close()


def test_chunked_framing_split_anywhere() -> None:
    for cut in range(1, len(CHUNKED)):
        res, finished = _feed_all(CHUNKED, [CHUNKED[:cut], CHUNKED[cut:]])
        assert finished and res.status == 200 and res.error_kind is None, cut
        assert b"".join(d for _, d in res.chunks) == b"".join(SSE), cut


def test_chunked_framing_byte_by_byte_and_content_length() -> None:
    res, finished = _feed_all(CHUNKED, [CHUNKED[i : i + 1] for i in range(len(CHUNKED))])
    assert finished and b"".join(d for _, d in res.chunks) == b"".join(SSE)
    body = b'{"error": "overloaded"}'
    resp = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    res, finished = _feed_all(resp, [resp[:30], resp[30:]])
    assert finished and res.status == 503 and b"".join(d for _, d in res.chunks) == body


async def _serve(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> asyncio.Server:
    return await asyncio.start_server(handler, "127.0.0.1", 0)


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(
        next(
            line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
    )
    return head + await reader.readexactly(length)


def test_keep_alive_reuse_stale_retry_timeout_and_refused() -> None:
    seen: list[bytes] = []
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while True:
                req = await _read_request(reader)
                seen.append(req)
                if b'"stall"' in req:
                    await asyncio.sleep(5)
                writer.write(CHUNKED)
                await writer.drain()
                if b'"last"' in req:  # server closes the keep-alive connection after answering
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await _serve(handler)
        port = server.sockets[0].getsockname()[1]
        wc = WireClient(f"http://127.0.0.1:{port}/v1", "/chat/completions", {"X-Test": "1"}, timeout=0.5)
        await wc.warm(2)
        assert connections == 2
        r1 = await wc.request(0, wc.encode(b'{"n": 1}'), 0.0)
        r2 = await wc.request(1, wc.encode(b'{"last": 1}'), 0.0)
        assert r1.error_kind is None and r2.error_kind is None
        assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and b"X-Test: 1\r\n" in seen[0]
        assert connections == 2  # both reused from warm()
        await asyncio.sleep(0.05)  # the server has closed that connection: the next request must not fail
        for i in range(3):
            r = await wc.request(2 + i, wc.encode(b'{"n": 3}'), 0.0)
            assert r.error_kind is None, r.error
        t = await wc.request(9, wc.encode(b'{"stall": 1}'), 0.0)
        assert t.error_kind == "timeout"
        wc.close()
        server.close()
        await server.wait_closed()
        refused = WireClient(f"http://127.0.0.1:{port}", "/x", {}, timeout=1)
        r = await refused.request(0, refused.encode(b"{}"), 0.0)
        assert r.error_kind == "connect"

    asyncio.run(main())
