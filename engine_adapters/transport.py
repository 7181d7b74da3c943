"""HTTP transports for the load driver behind one small interface.

httpx is the default client (design card); aiohttp is the same interface on a faster stack,
selectable with `request_options["client"] = "aiohttp"`. Both hand the driver raw body bytes as
they are read (no decompression, no line splitting) so it can stamp each read before parsing.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

HEADERS = {"content-type": "application/json", "accept": "text/event-stream, audio/pcm, */*",
           "accept-encoding": "identity"}
ERROR_BODY_LIMIT = 64 * 1024


class TransportError(Exception):
    """Connection-level failure (refused, reset, truncated body ...)."""


@dataclass
class StreamResponse:
    status: int
    chunks: Callable[[], AsyncIterator[bytes]]
    read_error_body: Callable[[], Awaitable[bytes]]


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
            raise TransportError(_describe(exc)) from None

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for data in resp.aiter_raw():
                    yield data
            except httpx.TransportError as exc:
                raise TransportError(_describe(exc)) from None

        async def error_body() -> bytes:
            out = bytearray()
            try:
                async for data in resp.aiter_raw():
                    out += data
                    if len(out) >= ERROR_BODY_LIMIT:
                        break
            except httpx.TransportError:
                return bytes(out)  # the status code is the failure; a broken error body adds nothing
            return bytes(out[:ERROR_BODY_LIMIT])

        try:
            yield StreamResponse(resp.status_code, chunks, error_body)
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
            raise TransportError(_describe(exc)) from None

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for data in resp.content.iter_any():
                    yield data
            except aiohttp.ClientError as exc:
                raise TransportError(_describe(exc)) from None

        async def error_body() -> bytes:
            try:
                return await resp.content.read(ERROR_BODY_LIMIT)
            except aiohttp.ClientError:
                return b""

        try:
            yield StreamResponse(resp.status, chunks, error_body)
        finally:
            resp.close()

    async def close(self) -> None:
        await self.session.close()


TRANSPORTS = {"httpx": HttpxTransport, "aiohttp": AiohttpTransport}


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
