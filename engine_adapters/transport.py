"""HTTP transports for the load driver behind one small interface.

The driver hands `post()` a *sink*, `sink(stamp_ns, body_bytes) -> stop?`, and every transport
feeds it each body read as early as its layers allow, stamped before any parsing of the payload:

- `stamped` (default): an asyncio BufferedProtocol per connection with the llhttp parser from
  httptools. `buffer_updated` takes `perf_counter_ns()` the moment the event loop has read the
  socket bytes into the transport's read buffer, before HTTP parsing, and the sink runs inside
  that same callback: no future, no task
  wake-up, no coroutine step per chunk. aiohttp's path (C parser, then a StreamReader feed that
  wakes the reading task, which stamps when it next runs) puts every other ready stream's wake-up
  between the socket read and the stamp: with it the driver was only at parity with a plain
  aiohttp client at C=128. Measured with bench/bench_timing_fidelity.py on a quiet 16-core host,
  arrival - emit p50 / p99 (ms), 3 repeats: stamped 0.07 / 0.29-0.30, aiohttp driver
  0.14 / 0.34-0.40, plain client 0.14 / 0.42-0.43 at C=128. No library exposes the
  protocol-level read, so this small client is hand-written (keep-alive pool, Content-Length
  requests, chunked / length / close-delimited responses: what streaming engines send).
- `aiohttp`: llhttp too, but stamped when the reading coroutine resumes (readany).
- `httpx` (the design card's client): pure-Python h11 chunked decoding, httpcore and anyio layers
  per read; a burst of synchronised 64 KB events at C >= 32 delays later streams by milliseconds.

Every connection-level failure surfaces as `TransportError` with a one-line reason, whatever the
library underneath (the driver maps it to the `transport` failure class). Every transport also
hands over the response's Content-Type and Content-Encoding, read once with the status line, so
the driver can say what arrived when it is not a stream it decodes (docs/engines.md).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, Protocol
from urllib.parse import urlsplit

from data.errors import one_line

HEADERS = {"content-type": "application/json", "accept": "text/event-stream, audio/pcm, */*",
           "accept-encoding": "identity"}
ERROR_BODY_LIMIT = 64 * 1024
READ_BUFFER_BYTES = 256 * 1024  # the stamped transport's read size (uvloop's own read buffer is this size)

Sink = Callable[[int, bytes], bool]  # (perf_counter_ns stamp, body bytes) -> True to stop reading


class TransportError(Exception):
    """Connection-level failure (refused, reset, truncated body ...)."""


@dataclass
class StreamResponse:
    status: int
    # feed every body read to the sink until it says stop (-> False) or the body ends (-> True)
    body: Callable[[Sink], Awaitable[bool]]
    content_type: str | None = None  # the response headers' values (None: absent)
    content_encoding: str | None = None

    async def read_error_body(self) -> bytes:
        """Up to ERROR_BODY_LIMIT bytes of a non-2xx body; a broken error body adds nothing to
        the failure (the status code is the failure), so what arrived is returned as is."""
        out = bytearray()

        def sink(_t: int, data: bytes) -> bool:
            out.extend(data)
            return len(out) >= ERROR_BODY_LIMIT

        try:
            await self.body(sink)
        except TransportError:
            pass
        return bytes(out[:ERROR_BODY_LIMIT])


async def _pump(read: Callable[[], Awaitable[bytes]], sink: Sink, errors: tuple[type[BaseException], ...]) -> bool:
    """Pull-style clients: stamp each read as the reading coroutine resumes; the library's read
    errors become TransportError."""
    now = time.perf_counter_ns
    try:
        while data := await read():
            if sink(now(), data):
                return False
    except errors as exc:
        raise TransportError(one_line(exc)) from None
    return True


class HttpxTransport:
    name = "httpx"

    def __init__(self, concurrency: int, headers: dict[str, str] | None = None):
        import httpx

        self._httpx = httpx
        self.version = f"httpx {httpx.__version__}"
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency,
                              keepalive_expiry=30.0)
        self.client = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(None),
                                        headers={**HEADERS, **(headers or {})})

    @asynccontextmanager
    async def post(self, url: str, body: bytes, on_send: Callable[[], None],
                   headers: dict[str, str] | None = None) -> AsyncIterator[StreamResponse]:
        httpx = self._httpx
        req = self.client.build_request("POST", url, content=body, headers=headers)
        on_send()
        try:
            resp = await self.client.send(req, stream=True)
        except httpx.TransportError as exc:
            raise TransportError(one_line(exc)) from None
        # one generator per response, closed below whatever happens: an abandoned one would be
        # finalised by the loop later ("Task was destroyed but it is pending!")
        raw = resp.aiter_raw()

        def read() -> Awaitable[bytes]:
            return anext(raw, b"")

        try:
            yield StreamResponse(resp.status_code, lambda sink: _pump(read, sink, (httpx.TransportError,)),
                                 resp.headers.get("content-type"), resp.headers.get("content-encoding"))
        finally:
            try:
                await raw.aclose()  # type: ignore[attr-defined]  # httpx types aiter_raw() as AsyncIterator; it is an async generator
            finally:
                await resp.aclose()

    async def close(self) -> None:
        await self.client.aclose()


class AiohttpTransport:
    name = "aiohttp"

    def __init__(self, concurrency: int, headers: dict[str, str] | None = None):
        import aiohttp

        self._aiohttp = aiohttp
        self.version = f"aiohttp {aiohttp.__version__}"
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency),
            timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False,
            headers={**HEADERS, **(headers or {})},
        )

    @asynccontextmanager
    async def post(self, url: str, body: bytes, on_send: Callable[[], None],
                   headers: dict[str, str] | None = None) -> AsyncIterator[StreamResponse]:
        aiohttp = self._aiohttp
        on_send()
        try:
            resp = await self.session.post(url, data=body, headers=headers)
        except aiohttp.ClientError as exc:
            raise TransportError(one_line(exc)) from None

        try:
            # StreamReader.readany: whatever the connection has delivered, straight from its buffer
            yield StreamResponse(resp.status, lambda sink: _pump(resp.content.readany, sink, (aiohttp.ClientError,)),
                                 resp.headers.get("Content-Type"), resp.headers.get("Content-Encoding"))
        finally:
            resp.close()

    async def close(self) -> None:
        await self.session.close()


class _Exchange:
    """One request/response on a connection: where `buffer_updated`'s stamps and bytes go."""

    __slots__ = ("head", "done", "sink", "early")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        # (status, content-type, content-encoding), once the headers are parsed
        self.head: asyncio.Future[tuple[int, str | None, str | None]] = loop.create_future()
        self.done: asyncio.Future[bool] = loop.create_future()  # True: body ended; False: the sink stopped
        self.sink: Sink | None = None
        self.early: list[tuple[int, bytes]] = []  # body bytes read before the sink was attached

    def fail(self, exc: BaseException) -> None:
        """Raise in whoever waits: for the headers, else for the body."""
        fut = self.done if self.head.done() else self.head
        if not fut.done():
            fut.set_exception(exc)

    def attach(self, sink: Sink) -> None:
        """Start feeding `sink`, first with what arrived before it was attached."""
        self.sink = sink
        early, self.early = self.early, []
        for t, data in early:
            if self.done.done():
                return
            if not data:  # the message ended before the sink was attached
                self.done.set_result(True)
            elif sink(t, data):
                self.done.set_result(False)

    async def read_body(self, sink: Sink) -> bool:
        """StreamResponse.body: feed `sink` until it stops (False) or the body ends (True)."""
        self.attach(sink)
        return await self.done

    def finish(self) -> None:
        if self.sink is None:  # the body ended before anyone asked for it: body() replays `early`
            self.early.append((0, b""))
        elif not self.done.done():
            self.done.set_result(True)


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive HTTP/1.1 connection; each socket read is stamped before it is parsed.

    A BufferedProtocol: the loop reads the socket straight into `read_buffer` (one per transport,
    shared by its connections: a read is parsed to the end before the loop reads again) and
    llhttp parses it in place, so no bytes object is made per read; only the body bytes kept
    (llhttp's on_body) are copied out of it (docs/performance.md, "Per-event CPU")."""

    def __init__(self, pool: list["_Connection"], max_idle: int, on_lost: Callable[["_Connection"], None],
                 read_buffer: memoryview):
        import httptools

        self._httptools = httptools
        self.read_buffer = read_buffer
        self.pool = pool  # the idle list this connection returns to
        self.max_idle = max_idle
        self.on_lost = on_lost
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.stamp = 0
        self.framed = False  # Content-Length or Transfer-Encoding seen: the body does not end at EOF
        self.content_type: str | None = None  # this message's headers (once per response, not per read)
        self.content_encoding: str | None = None
        self.draining = False  # the caller is done; return to the pool when the message ends
        self.keep_alive = False  # read inside on_message_complete: llhttp resets it once the message is done
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.stamp = time.perf_counter_ns()  # first, before any parsing
        if self.exchange is None:  # bytes nobody asked for: the connection is not trustworthy
            self.abort()
            return
        try:
            self.parser.feed_data(self.read_buffer[:nbytes])
        except self._httptools.HttpParserError as exc:
            self.exchange.fail(TransportError(f"malformed HTTP response: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.on_lost(self)
        if self in self.pool:
            self.pool.remove(self)
        ex, self.exchange = self.exchange, None
        if ex is None:
            return
        if exc is None and ex.head.done() and not self.framed:
            ex.finish()  # a close-delimited body ends at EOF
            return
        why = f": {one_line(exc)}" if exc else ""
        ex.fail(TransportError(f"connection closed before the response ended{why}"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.framed = False
        self.content_type = self.content_encoding = None

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in (b"content-length", b"transfer-encoding"):
            self.framed = True
        elif name == b"content-type":
            self.content_type = value.decode("latin-1")
        elif name == b"content-encoding":
            self.content_encoding = value.decode("latin-1")

    def _head(self) -> tuple[int, str | None, str | None]:
        return self.parser.get_status_code(), self.content_type, self.content_encoding

    def on_headers_complete(self) -> None:
        assert self.exchange is not None
        if not self.exchange.head.done():
            self.exchange.head.set_result(self._head())

    def on_body(self, body: bytes) -> None:
        ex = self.exchange
        assert ex is not None
        if ex.sink is None:
            ex.early.append((self.stamp, body))
        elif not ex.done.done() and ex.sink(self.stamp, body):
            ex.done.set_result(False)

    def on_message_complete(self) -> None:
        ex, self.exchange = self.exchange, None
        assert ex is not None
        self.keep_alive = self.parser.should_keep_alive()
        if not ex.head.done():  # 1xx/HEAD-like message without headers_complete: cannot happen for POST
            ex.head.set_result(self._head())
        ex.finish()
        if self.draining:
            self.release()

    # pool
    def release(self) -> None:
        """Back to the idle pool if the message ended and the server keeps the connection."""
        self.draining = False
        if self.closed or self.exchange is not None:
            return
        if self.keep_alive and len(self.pool) < self.max_idle:
            self.pool.append(self)
        else:
            self.transport.close()  # type: ignore[union-attr]

    def abort(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.abort()


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str
    port: int
    head: str  # the request head up to the content length's value


class _Post:
    """One request on the stamped transport as an async context manager: enter sends it and
    waits for the response head, exit returns the connection to the pool or drops it."""

    __slots__ = ("_owner", "_url", "_body", "_on_send", "_headers", "_conn", "_ex")

    def __init__(self, owner: "StampedTransport", url: str, body: bytes, on_send: Callable[[], None],
                 headers: dict[str, str] | None):
        self._owner, self._url, self._body, self._on_send, self._headers = owner, url, body, on_send, headers
        self._conn: _Connection | None = None
        self._ex: _Exchange | None = None

    async def __aenter__(self) -> StreamResponse:
        t = self._owner._target(self._url, self._headers)
        body = self._body
        # head and body go out as two buffers (one writev): no copy of a body that carries a prompt
        request = [f"{t.head}{len(body)}\r\n\r\n".encode("latin-1"), body]
        self._on_send()
        conn = self._conn = await self._owner._connect(t.scheme, t.host, t.port)
        ex = self._ex = conn.exchange = _Exchange(asyncio.get_running_loop())
        try:
            conn.transport.writelines(request)  # type: ignore[union-attr]
            status, content_type, content_encoding = await ex.head
        except BaseException:
            self._finish(False)
            raise
        return StreamResponse(status, ex.read_body, content_type, content_encoding)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> None:
        self._finish(exc_type is None)

    def _finish(self, clean: bool) -> None:
        conn, ex = self._conn, self._ex
        assert conn is not None and ex is not None
        done = ex.done
        failed = done.done() and (done.cancelled() or done.exception() is not None)  # (marks it retrieved)
        if conn.exchange is None and not failed:  # the message ended: reuse the connection
            conn.release()
        elif clean and done.done() and not failed:
            conn.draining = True  # the sink stopped at the end marker: let the rest of the message arrive
        else:  # timeout, cancellation, failure, or a body nobody finished reading
            conn.exchange = None  # nobody waits any more: connection_lost has nothing to report
            conn.abort()


class StampedTransport:
    """HTTP/1.1 keep-alive client whose timing path is the protocol callback itself."""

    name = "stamped"

    def __init__(self, concurrency: int, headers: dict[str, str] | None = None):
        import httptools

        self.version = f"stamped (asyncio protocol, httptools {httptools.__version__})"
        self.concurrency = concurrency
        self.headers = {**HEADERS, **(headers or {})}
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))  # every connection's reads land here
        self._targets: dict[tuple[str, tuple[tuple[str, str], ...] | None], _Target] = {}

    async def _connect(self, scheme: str, host: str, port: int) -> _Connection:
        idle = self._idle.setdefault((scheme, host, port), [])
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        ctx = ssl.create_default_context() if scheme == "https" else None
        try:
            _, conn = await loop.create_connection(lambda: _Connection(idle, self.concurrency, self._open.discard, self._read_buffer), host, port, ssl=ctx)
        except OSError as exc:
            raise TransportError(f"connect to {host}:{port} failed: {one_line(exc)}") from None
        self._open.add(conn)
        return conn

    def _target(self, url: str, headers: dict[str, str] | None) -> _Target:
        """Where a request goes and its head up to the content length, built once per (URL,
        headers): parsing the URL and joining the head per request was per-request CPU."""
        key = (url, tuple(headers.items()) if headers else None)
        got = self._targets.get(key)
        if got is None:
            u = urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise TransportError(f"unsupported URL {url!r}: need http:// or https:// and a host")
            port = u.port or (443 if u.scheme == "https" else 80)
            target = (u.path or "/") + (f"?{u.query}" if u.query else "")
            hdrs = {**self.headers, **(headers or {})}
            head = "".join(f"{k}: {v}\r\n" for k, v in hdrs.items() if k.lower() not in ("host", "content-length"))
            got = self._targets[key] = _Target(u.scheme, u.hostname, port,
                                               f"POST {target} HTTP/1.1\r\nhost: {u.netloc}\r\n{head}content-length: ")
        return got

    def post(self, url: str, body: bytes, on_send: Callable[[], None],
             headers: dict[str, str] | None = None) -> _Post:
        """`async with transport.post(...) as resp`: a class, not an async generator, because its
        enter and exit run once per request in the driver's loop."""
        return _Post(self, url, body, on_send, headers)

    async def close(self) -> None:
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let connection_lost callbacks run before the loop closes


class Transport(Protocol):
    """What the driver needs of an HTTP client: the three above."""
    name: str
    version: str

    def post(self, url: str, body: bytes, on_send: Callable[[], None],
             headers: dict[str, str] | None = None) -> AbstractAsyncContextManager[StreamResponse]: ...

    async def close(self) -> None: ...


TRANSPORTS: dict[str, Callable[[int, dict[str, str] | None], Transport]] = {
    "stamped": StampedTransport, "aiohttp": AiohttpTransport, "httpx": HttpxTransport}

