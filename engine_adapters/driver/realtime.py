"""One duplex Realtime session per request, over the `websockets` library (docs/timing.md,
"WebSocket sessions"; the wire is engine_adapters/dialects/vllm_omni_realtime.py).

Why `websockets`: its asyncio client takes a `create_connection` factory, a documented hook for
a ClientConnection subclass, so each socket read is stamped in the protocol's `data_received`
before the library parses a frame: the same place the stamped HTTP transport stamps
(transport.py). aiohttp's WebSocket client parses inside its own protocol and hands whole
messages to a reading coroutine, stamped only when that coroutine runs, the delay the aiohttp
HTTP transport has. It is also the client vLLM-Omni's own duplex client uses
(vllm_omni/clients/duplex.py `_default_connect`).

The hot path is `_StampedConnection.data_received`: stamp, append the stamp and the bytes (after
the 101 response head), then the library's own processing. The session's coroutine reads the
library's messages only to know when the response has ended (a regex on each message's head);
framing and JSON for the record happen later, in the parent (dialects/vllm_omni_realtime.Parser).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidHandshake, InvalidStatus, PayloadTooBig

from data.errors import one_line
from engine_adapters.dialects import vllm_omni_realtime as wire
from engine_adapters.driver.answers import error_text
from engine_adapters.driver.results import RawResult
from engine_adapters.transport import TransportError

CLIENT = f"websockets {websockets.__version__}"
_HEAD_END = b"\r\n\r\n"


class _StampedConnection(ClientConnection):
    """A ClientConnection that keeps every read after the handshake, stamped first thing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stamps: list[int] = []
        self.chunks: list[bytes] = []
        self._head = b""  # the 101 response head, until its blank line has been read
        self._opened = False

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()  # first, before the library parses anything
        if self._opened:
            self.stamps.append(t)
            self.chunks.append(data)
        else:  # frames start right after the head's blank line (a 101 has no body)
            head = self._head + data
            k = head.find(_HEAD_END)
            if k < 0:
                self._head = head[-3:] if len(head) > 65536 else head
            else:
                self._opened = True
                rest = head[k + len(_HEAD_END):]
                if rest:
                    self.stamps.append(t)
                    self.chunks.append(rest)
        super().data_received(data)


def ws_url(url: str) -> str:
    """http(s)://host/path -> ws(s)://host/path (build_realtime_url in vllm_omni/clients/duplex.py)."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss") or not parts.netloc:
        raise TransportError(f"unsupported URL {url!r}: need http(s):// or ws(s):// and a host")
    return urlunsplit((scheme, parts.netloc, parts.path, parts.query, parts.fragment))


async def session(url: str, opening: bytes, raw: RawResult, on_send: Callable[[], None],
                  headers: dict[str, str] | None, plan: wire.SessionPlan, max_event_bytes: int) -> None:
    """Drive one session into `raw`: connect, send `opening` (session.update), stream silence until
    the response ends, close the session. A refused upgrade sets `raw.failure` (http_status); a
    broken connection raises TransportError; a clean close sets `raw.clean_eof`."""
    on_send()
    try:
        ws = await connect(ws_url(url), additional_headers=headers, compression=None, proxy=None,
                           open_timeout=None, ping_interval=None, close_timeout=2, max_size=max_event_bytes,
                           max_queue=None, create_connection=_StampedConnection, user_agent_header=None)
    except InvalidStatus as exc:
        raw.http_status = exc.response.status_code
        raw.failure = ("http_status", f"HTTP {exc.response.status_code}: {error_text(bytes(exc.response.body or b''))}")
        raw.t_end_ns = time.perf_counter_ns()
        return
    except (OSError, InvalidHandshake) as exc:
        raise TransportError(f"WebSocket connect to {url} failed: {one_line(exc)}") from None
    assert isinstance(ws, _StampedConnection)
    raw.http_status = 101
    raw.stamps, raw.chunks = ws.stamps, ws.chunks  # the same lists: the reads land in the result
    ended = asyncio.Event()
    writer: asyncio.Task[None] | None = None
    try:
        await ws.send(opening, text=True)
        writer = asyncio.ensure_future(_silence(ws, plan, ended))
        last = await _read_until_end(ws)
        raw.t_end_ns = time.perf_counter_ns()
        ended.set()
        if last == "overflow":
            raw.overflow = f"WebSocket message exceeds {max_event_bytes} bytes"
        elif last not in (None, "session.closed", "session.expired", "session.resync_required"):
            await _close_session(ws, plan.close_wait_s)
        raw.clean_eof = True
    except ConnectionClosedOK:
        raw.clean_eof = True
    except ConnectionClosed as exc:
        raise TransportError(f"connection closed before the response ended: {one_line(exc)}") from None
    finally:
        ended.set()
        if writer is not None:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        if raw.clean_eof:
            await _close_quietly(ws)
        else:  # timeout, cancellation, a broken connection: nobody waits for a close handshake
            ws.transport.abort()


async def _read_until_end(ws: ClientConnection) -> str | None:
    """Messages until one of the dialect's END_TYPES; its type ("overflow" for a message over the
    size limit). A clean close before it returns None (the parser says what was missing)."""
    while True:
        try:
            message = await ws.recv(decode=False)
        except ConnectionClosedOK:
            return None
        except ConnectionClosed as exc:
            if isinstance(exc.__cause__, PayloadTooBig) or (exc.sent is not None and exc.sent.code == 1009):
                return "overflow"
            raise
        if isinstance(message, str):  # not reached with decode=False; kept for the type checker
            message = message.encode()
        kind = wire.event_type(message)
        if kind in wire.END_TYPES:
            return kind


async def _silence(ws: ClientConnection, plan: wire.SessionPlan, ended: asyncio.Event) -> None:
    """Append silence in real time until the response ends or `plan.silence_s` is spent (the
    benchmark's stream_silence): the model speaks per audio unit."""
    audio = wire.silence_b64(plan)
    sent_ms = 0
    start = time.monotonic()
    while not ended.is_set() and sent_ms < plan.silence_s * 1000:
        sent_ms += plan.append_ms
        try:
            await ws.send(wire.append_event(audio, plan.append_ms, sent_ms))
        except ConnectionClosed:
            return
        delay = start + sent_ms / 1000 - time.monotonic()  # paced against the start: no drift
        if delay > 0:
            try:
                await asyncio.wait_for(ended.wait(), delay)
            except TimeoutError:
                pass


async def _close_session(ws: ClientConnection, wait_s: float) -> None:
    """session.close, then wait for session.closed (or the socket's close): a session left open
    holds its slot for the server's disconnect grace."""
    try:
        await ws.send(wire.CLOSE_EVENT)
        async with asyncio.timeout(wait_s):
            while True:
                message = await ws.recv(decode=False)
                if wire.event_type(message if isinstance(message, bytes) else message.encode()) == "session.closed":
                    return
    except (ConnectionClosed, TimeoutError):
        return


async def _close_quietly(ws: ClientConnection) -> None:
    try:
        await ws.close()
    except Exception:  # noqa: BLE001 - the result is already complete; a failing close changes nothing
        ws.transport.abort()
