"""The driver's default transport (`stamped`: asyncio Protocol + httptools) against a raw TCP
server that writes exact response bytes: framing, keep-alive reuse, draining after the end
marker, and every way a response can break."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_adapters.transport import TRANSPORTS, StampedTransport, TransportError
from engine_adapters.transport_names import DEFAULT_TRANSPORT, TRANSPORT_NAMES

CHUNKED = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class RawServer:
    """Answers each request with `script(n)`: a list of bytes to write and float pauses to take
    (None closes the connection); counts connections and requests."""

    def __init__(self, script):
        self.script = script
        self.connections = 0
        self.requests = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/x"
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                self.requests += 1
                for step in self.script(self.requests):
                    if step is None:
                        writer.close()
                        return
                    if isinstance(step, float):
                        await asyncio.sleep(step)
                    else:
                        writer.write(step)
                        await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


async def fetch(transport, url, stop_on=None):
    """(status, [(stamp, bytes)], body ended cleanly?) for one POST."""
    reads: list[tuple[int, bytes]] = []

    def sink(t, data):
        reads.append((t, data))
        return stop_on is not None and stop_on in data

    async with transport.post(url, b'{"x": 1}', lambda: None) as resp:
        clean = await resp.body(sink)
    return resp.status, reads, clean


def run(coro):
    return asyncio.run(coro)


def test_chunked_stream_is_stamped_per_read_and_the_connection_is_reused():
    script = lambda n: [CHUNKED, chunk(b"data: one\n\n"), 0.03, chunk(b"data: two\n\n"), b"0\r\n\r\n"]

    async def main():
        async with RawServer(script) as srv:
            t = StampedTransport(2)
            before = time.perf_counter_ns()
            got = [await fetch(t, srv.url) for _ in range(3)]
            await t.close()
            return srv, got, before

    srv, got, before = run(main())
    for status, reads, clean in got:
        assert status == 200 and clean
        assert b"".join(d for _, d in reads) == b"data: one\n\ndata: two\n\n"
        assert reads[0][0] > before and reads[-1][0] - reads[0][0] >= 25_000_000  # the 30 ms pause shows
    assert srv.requests == 3 and srv.connections == 1


def test_stop_at_end_marker_drains_then_reuses_the_connection():
    script = lambda n: [CHUNKED, chunk(b"data: [DONE]\n\n"), 0.05, b"0\r\n\r\n"]

    async def main():
        async with RawServer(script) as srv:
            t = StampedTransport(1)
            first = await fetch(t, srv.url, stop_on=b"[DONE]")
            await asyncio.sleep(0.2)  # the terminating chunk arrives 50 ms after [DONE]
            second = await fetch(t, srv.url, stop_on=b"[DONE]")
            await t.close()
            return srv, first, second

    srv, first, second = run(main())
    assert first[2] is False and second[2] is False  # the sink stopped both
    assert srv.connections == 1 and srv.requests == 2


def test_close_delimited_body_ends_at_eof_and_is_not_reused():
    script = lambda n: [b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n", b"abc", 0.01, b"def", None]

    async def main():
        async with RawServer(script) as srv:
            t = StampedTransport(1)
            got = [await fetch(t, srv.url) for _ in range(2)]
            await asyncio.sleep(0.05)
            open_after = len(t._open)  # closed connections are forgotten, not kept until close()
            await t.close()
            return srv, got, open_after

    srv, got, open_after = run(main())
    assert all(status == 200 and clean and b"".join(d for _, d in r) == b"abcdef" for status, r, clean in got)
    assert srv.connections == 2 and open_after == 0


@pytest.mark.parametrize("script, message", [
    (lambda n: [CHUNKED, chunk(b"data: half"), None], "connection closed before the response ended"),
    (lambda n: [CHUNKED, b"zz\r\nnot hex\r\n"], "malformed HTTP response"),
    (lambda n: [b"HTP/1.1 200 OK\r\n\r\n"], "malformed HTTP response"),
    (lambda n: [None], "connection closed before the response ended"),
])
def test_broken_responses_raise_transport_error(script, message):
    async def main():
        async with RawServer(script) as srv:
            t = StampedTransport(1)
            try:
                with pytest.raises(TransportError, match=message):
                    await fetch(t, srv.url)
            finally:
                await t.close()

    run(main())


def test_error_status_body_and_refused_connection():
    body = b'{"detail": "overloaded"}'
    script = lambda n: [b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)]

    async def main():
        async with RawServer(script) as srv:
            t = StampedTransport(1)
            async with t.post(srv.url, b"{}", lambda: None) as resp:
                status, text = resp.status, await resp.read_error_body()
            url = srv.url
            await t.close()
        t = StampedTransport(1)
        with pytest.raises(TransportError, match="connect to 127.0.0.1"):
            async with t.post(url, b"{}", lambda: None):
                pass
        await t.close()
        return status, text

    assert run(main()) == (503, body)


def test_timeout_aborts_the_connection_and_the_next_request_gets_a_new_one():
    script = lambda n: [CHUNKED, chunk(b"data: x\n\n"), 5.0] if n == 1 else [CHUNKED, b"0\r\n\r\n"]

    async def main():
        async with RawServer(script) as srv:
            t = StampedTransport(1)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await fetch(t, srv.url)
            status, reads, clean = await fetch(t, srv.url)
            await t.close()
            return srv, status, clean

    srv, status, clean = run(main())
    assert status == 200 and clean and srv.connections == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.sampled_from([CHUNKED, b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n", b""]),
       junk=st.binary(max_size=300), close=st.booleans())
def test_arbitrary_response_bytes_end_in_an_outcome(head, junk, close):
    """Whatever the server sends, a request ends: clean, stopped, or a TransportError (never a
    hang, never another exception)."""
    script = lambda n: [head + junk, None] if close else [head + junk, 0.05, None]

    async def main():
        async with RawServer(script) as srv:
            t = StampedTransport(1)
            try:
                async with asyncio.timeout(5):
                    await fetch(t, srv.url)
            except TransportError:
                pass
            finally:
                await t.close()

    run(main())


@pytest.mark.parametrize("name", ["stamped", "aiohttp", "httpx"])
def test_every_transport_hands_over_content_type_and_encoding(name):
    """The driver says what arrived from these two headers (read once per response, with the
    status line); every transport reports them as sent, and None when absent."""
    from engine_adapters.transport import TRANSPORTS

    heads = {1: b"HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\ncontent-encoding: gzip\r\n"
                b"content-length: 2\r\n\r\n{}",
             2: b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"}
    script = lambda n: [heads[n]]

    async def main():
        async with RawServer(script) as srv:
            t = TRANSPORTS[name](1)
            got = []
            for _ in range(2):
                async with t.post(srv.url, b"{}", lambda: None) as resp:
                    got.append((resp.status, resp.content_type, resp.content_encoding))
                    await resp.body(lambda _t, _d: False)
            await t.close()
            return got

    assert run(main()) == [(200, "application/json; charset=utf-8", "gzip"), (200, None, None)]


def test_the_light_list_of_client_names_is_the_clients():
    """The CLI offers TRANSPORT_NAMES without importing the clients (asyncio, ssl): it must be
    exactly the clients' names."""
    assert tuple(TRANSPORTS) == TRANSPORT_NAMES and DEFAULT_TRANSPORT in TRANSPORTS
