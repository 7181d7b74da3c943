"""The driver in its own process, seen from the parent: start it (or hand its spec to a warm one),
read its pipe on a decode thread at idle priority, hand record batches to the store's owner."""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import threading
import time
from typing import Any, Callable, Iterator

from engine_adapters.driver.child import child_main
from engine_adapters.driver.decode import decode_batch
from engine_adapters.driver.priority import idle_priority
from engine_adapters.driver.results import DriveSummary, InflightRow
from engine_adapters.driver.spec import DriveSpec
from engine_adapters.driver.stop import stop_process
from engine_adapters.driver.warm import take_warm
from engine_adapters.driver.wire import MessageReader


class DriverProcess:
    """The driver in its own process ('spawn': a clean interpreter, no inherited loop or locks).

    Iterate `batches()` in the owner of the store; `summary` is set once the child is done. The
    pipe is read and decoded by a thread of this process at idle priority (`idle_priority`), so
    decoding never takes CPU from the driver; `consume(records) -> records`, if given, runs on that
    thread too (storing them, say), and `batches()` hands over what it returns, in order.
    `on_inflight(rows, now_ns)`, if given, gets the requests still streaming every INFLIGHT_S (on
    the same thread; `now_ns` is this process's perf_counter_ns, the driver's clock).
    """

    def __init__(self, spec: DriveSpec, consume: Callable[[list[Any]], list[Any]] | None = None,
                 on_inflight: Callable[[list[InflightRow], int], None] | None = None):
        spec.validate()
        self.spec = spec
        self._warm = take_warm()
        if self._warm is not None:  # prewarm(): already imported, waiting for this spec
            self._recv, self._send, self._cancel, self._proc = (self._warm.recv, self._warm.send, self._warm.cancel,
                                                                self._warm.proc)
        else:
            ctx = mp.get_context("spawn")
            self._recv, self._send = ctx.Pipe(duplex=False)
            self._cancel = ctx.Event()
            self._proc = ctx.Process(target=child_main, args=(spec, self._send, self._cancel, on_inflight is not None),
                                     name=f"driver-{spec.run_id}", daemon=True)
        self.summary: DriveSummary | None = None
        self.fatal: str | None = None
        self.decoder_priority: str | None = None
        self._consume = consume
        self._on_inflight = on_inflight
        self._reader = MessageReader(self._recv.fileno())
        self._out: queue_mod.SimpleQueue[tuple[str, Any]] = queue_mod.SimpleQueue()
        self._decoder = threading.Thread(target=self._decode_loop, name=f"decode-{spec.run_id}", daemon=True)

    def start(self) -> "DriverProcess":
        if self._warm is not None:
            self._warm.control.send((self.spec, self._on_inflight is not None))
            self._warm.control.close()
        else:
            self._proc.start()
        self._send.close()  # the child holds the write end now: EOF here means the child is gone
        self._decoder.start()
        return self

    def cancel(self) -> None:
        self._cancel.set()

    def batches(self, poll_s: float = 0.2) -> Iterator[list[Any]]:
        """Record batches as the child ships them, until it reports its summary or dies.

        An item leaves the queue only when handed over, so a KeyboardInterrupt in here (the
        caller then cancels and iterates again) loses nothing."""
        while True:
            try:
                kind, payload = self._out.get(timeout=poll_s)
            except queue_mod.Empty:
                continue
            if kind == "records":
                yield payload
                continue
            if kind == "summary":
                self.summary = payload
            elif kind == "fatal":
                self.fatal = payload
            else:  # the pipe closed without a summary: the child died
                self._proc.join(5.0)
                self.fatal = self.fatal or f"driver process exited with code {self._proc.exitcode}"
            return

    def _decode_loop(self) -> None:
        self.decoder_priority = idle_priority()
        reader = self._reader
        try:
            while True:
                msg = reader.next_message()
                if msg is None:
                    if not reader.fill():
                        self._out.put(("eof", None))
                        return
                    continue
                kind, payload = msg
                if kind == "inflight":
                    if self._on_inflight is not None:
                        self._on_inflight(payload, time.perf_counter_ns())
                    continue
                if kind != "raw":
                    self._out.put((kind, payload))
                    return
                # decoding (SSE framing, JSON, base64, WAV) and WAV writing happen here, in the
                # store owner's process, so they never delay the driver's arrival stamps
                records = decode_batch(self.spec, payload)
                self._out.put(("records", self._consume(records) if self._consume else records))
        except Exception as exc:  # a decoder or consumer failure must end batches(), not hang it
            self._out.put(("fatal", f"handling the driver's batches failed: {type(exc).__name__}: {exc}"))

    def join(self, timeout: float = 10.0) -> None:
        stop_process(self._proc, timeout)
        if self._decoder.ident is not None:  # the pipe is at EOF once the child is gone: the thread ends
            self._decoder.join()  # no timeout: the caller may use what `consume` uses once this returns
        self._recv.close()
