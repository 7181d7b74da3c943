"""HTTP transports for the load driver behind one small interface.

aiohttp is the default: measured with bench/bench_timing_fidelity.py, httpx's pure-Python HTTP
stack (h11 chunked decoding, httpcore and anyio layers per read) costs enough CPU per 64 KB event
that a burst of synchronised events at C >= 32 delays the later streams' arrival stamps by
milliseconds, while aiohttp decodes HTTP/1.1 in C (llhttp). httpx (the design card's client) stays
selectable with `request_options["client"] = "httpx"`.

Both hand the driver raw body bytes as they are read (no decompression, no line splitting) through
a plain `read()` coroutine (b"" at the end): no async generator sits in the timing path, and the
driver stamps each read before any parsing. Exceptions a read may raise are listed in
`transport.errors`; the driver maps them to the `transport` failure class with `describe()`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

HEADERS = {"content-type": "application/json", "accept": "text/event-stream, audio/pcm, */*",
           "accept-encoding": "identity"}
ERROR_BODY_LIMIT = 64 * 1024
DEFAULT_TRANSPORT = "aiohttp"


class TransportError(Exception):
    """Connection-level failure (refused, reset, truncated body ...)."""


@dataclass
class StreamResponse:
    status: int
    read: Callable[[], Awaitable[bytes]]  # the next body bytes as read; b"" once the body is complete
    read_error_body: Callable[[], Awaitable[bytes]]


class HttpxTransport:
    name = "httpx"

    def __init__(self, concurrency: int, headers: dict[str, str] | None = None):
        import httpx

        self._httpx = httpx
        self.errors: tuple[type[BaseException], ...] = (httpx.TransportError,)
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
            raise TransportError(describe(exc)) from None
        # one generator per response, closed below whatever happens: an abandoned one would be
        # finalised by the loop later ("Task was destroyed but it is pending!")
        raw = resp.aiter_raw()

        def read() -> Awaitable[bytes]:
            return anext(raw, b"")

        async def error_body() -> bytes:
            out = bytearray()
            try:
                while len(out) < ERROR_BODY_LIMIT and (data := await read()):
                    out += data
            except httpx.TransportError:  # the status code is the failure; a broken error body adds nothing
                return bytes(out[:ERROR_BODY_LIMIT])
            return bytes(out[:ERROR_BODY_LIMIT])

        try:
            yield StreamResponse(resp.status_code, read, error_body)
        finally:
            try:
                await raw.aclose()
            finally:
                await resp.aclose()

    async def close(self) -> None:
        await self.client.aclose()


class AiohttpTransport:
    name = "aiohttp"

    def __init__(self, concurrency: int, headers: dict[str, str] | None = None):
        import aiohttp

        self._aiohttp = aiohttp
        self.errors = (aiohttp.ClientError,)
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
            raise TransportError(describe(exc)) from None

        async def error_body() -> bytes:
            try:
                return await resp.content.read(ERROR_BODY_LIMIT)
            except aiohttp.ClientError:
                return b""

        try:
            # StreamReader.readany: whatever the connection has delivered, straight from its buffer
            yield StreamResponse(resp.status, resp.content.readany, error_body)
        finally:
            resp.close()

    async def close(self) -> None:
        await self.session.close()


TRANSPORTS = {"aiohttp": AiohttpTransport, "httpx": HttpxTransport}


def describe(exc: BaseException) -> str:
    """One line naming the exception class and its first message line."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
