"""The driver in its own process(es), seen from the parent: start it (or hand its spec to a warm
one), read its pipes on a decode thread at idle priority, hand record batches to the store's
owner. With `DriveSpec.shards` > 1 the drive is spread over that many driver processes
(shards.py); their records reach the owner as one stream and their summaries as one."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import queue as queue_mod
import selectors
import threading
import time
from typing import Any, Callable, Iterator

from engine_adapters.driver.child import child_main
from engine_adapters.driver.decode import decode_batch
from engine_adapters.driver.priority import idle_priority
from engine_adapters.driver.results import DriveSummary, InflightRow
from engine_adapters.driver.shards import ShardRole, merge_summaries, resolve_shards
from engine_adapters.driver.spec import DriveSpec
from engine_adapters.driver.stop import stop_process
from engine_adapters.driver.warm import take_warm
from engine_adapters.driver.wire import MessageReader

Outcome = tuple[DriveSummary | None, str | None]  # (summary, fatal)
Final = tuple[str, Any]  # a shard's last message: ("summary", DriveSummary) | ("fatal", str) | ("eof", None)


class DriverProcess:
    """The driver in its own process ('spawn': a clean interpreter, no inherited loop or locks).

    Iterate `batches()` in the owner of the store; `summary` is set once the child is done. The
    pipe is read and decoded by a thread of this process at idle priority (`idle_priority`), so
    decoding never takes CPU from the driver; `consume(records) -> records`, if given, runs on that
    thread too (storing them, say), and `batches()` hands over what it returns, in order.
    `on_inflight(rows, now_ns)`, if given, gets the requests still streaming every INFLIGHT_S (on
    the same thread; `now_ns` is this process's perf_counter_ns, the driver's clock).

    Sharded (`shards` > 1 once resolved): one child per shard, each with its own pipe; they share
    the cancel event and a start barrier. A shard that dies or reports a fatal error stops the
    others (cancel) and the drive ends with `fatal` naming that shard.
    """

    def __init__(self, spec: DriveSpec, consume: Callable[[list[Any]], list[Any]] | None = None,
                 on_inflight: Callable[[list[InflightRow], int], None] | None = None):
        spec.validate()
        self.spec = spec
        # never more shards than a phase can keep busy: an idle shard would only cost a spawn
        busy = max(len(spec.requests), spec.warmup_requests if spec.requests else 0)
        self.shards = resolve_shards(spec.shards, min(spec.concurrency, max(1, busy)))
        report = on_inflight is not None
        ctx = mp.get_context("spawn")
        self._warm = take_warm() if self.shards == 1 else None
        self._barrier: Any = None
        if self._warm is not None:  # prewarm(): already imported, waiting for this spec
            self._recv, self._send, self._cancel, self._proc = (self._warm.recv, self._warm.send, self._warm.cancel,
                                                                self._warm.proc)
            self._pipes = [(self._recv, self._send)]
            self._procs = [self._proc]
        else:
            self._cancel = ctx.Event()
            self._pipes = [ctx.Pipe(duplex=False) for _ in range(self.shards)]
            if self.shards == 1:
                self._procs = [ctx.Process(target=child_main, args=(spec, self._pipes[0][1], self._cancel, report),
                                           name=f"driver-{spec.run_id}", daemon=True)]
            else:
                self._barrier = ctx.Barrier(self.shards)
                self._procs = [ctx.Process(target=child_main,
                                           args=(spec, send, self._cancel, report, None,
                                                 ShardRole(k, self.shards, self._barrier)),
                                           name=f"driver-{spec.run_id}-{k + 1}of{self.shards}", daemon=True)
                               for k, (_, send) in enumerate(self._pipes)]
            self._recv, self._send = self._pipes[0]
            self._proc = self._procs[0]
        self.summary: DriveSummary | None = None
        self.fatal: str | None = None
        self.decoder_priority: str | None = None
        self._consume = consume
        self._on_inflight = on_inflight
        self._owner_cancelled = False
        self._inflight_last: dict[int, list[InflightRow]] = {}  # shard -> its latest in-flight rows
        self._out: queue_mod.SimpleQueue[tuple[str, Any]] = queue_mod.SimpleQueue()
        self._decoder = threading.Thread(target=self._decode_loop, name=f"decode-{spec.run_id}", daemon=True)

    @property
    def pids(self) -> list[int | None]:
        """The driver processes' ids, in shard order (None before start)."""
        return [p.pid for p in self._procs]

    def start(self) -> "DriverProcess":
        if self._warm is not None:
            self._warm.control.send((self.spec, self._on_inflight is not None))
            self._warm.control.close()
        else:
            for p in self._procs:
                p.start()
        for _, send in self._pipes:
            send.close()  # the child holds the write end now: EOF here means the child is gone
        self._decoder.start()
        return self

    def cancel(self) -> None:
        self._owner_cancelled = True
        self._cancel.set()

    def batches(self, poll_s: float = 0.2) -> Iterator[list[Any]]:
        """Record batches as the children ship them, until they report their summaries or die.

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
            self.summary, self.fatal = payload
            return

    # -- the decode thread ---------------------------------------------------------------------

    def _decode_loop(self) -> None:
        self.decoder_priority = idle_priority()
        try:
            outcome = self._outcome(self._read_all())
        except Exception as exc:  # a decoder or consumer failure must end batches(), not hang it
            outcome = (None, f"handling the driver's batches failed: {type(exc).__name__}: {exc}")
            if self.shards > 1:
                self._stop_peers()
        self._out.put(("end", outcome))

    def _read_all(self) -> list[Final]:
        """Read every child's pipe to its last message (or EOF); the shards' last messages."""
        readers = [MessageReader(recv.fileno()) for recv, _ in self._pipes]
        finals: dict[int, Final] = {}
        if len(readers) == 1:  # blocking reads, as ever
            while (final := self._drain(0, readers[0])) is None:
                pass
            return [final]
        with selectors.DefaultSelector() as sel:
            for k, r in enumerate(readers):
                sel.register(r.fd, selectors.EVENT_READ, k)
            while len(finals) < len(readers):
                for key, _ in sel.select():
                    k = key.data
                    final = self._drain(k, readers[k])
                    if final is not None:
                        sel.unregister(key.fd)
                        finals[k] = final
                        self._inflight_last.pop(k, None)
                        if final[0] != "summary" or final[1].error:  # a shard that failed stops the drive
                            self._stop_peers()
        return [finals[k] for k in range(len(readers))]

    def _drain(self, k: int, reader: MessageReader) -> Final | None:
        """Read once from shard k's pipe and handle every whole message; its last one, if it came."""
        if not reader.fill():
            return ("eof", None)
        while (msg := reader.next_message()) is not None:
            kind, payload = msg
            if kind == "inflight":
                if self._on_inflight is not None:
                    self._on_inflight(self._inflight_rows(k, payload), time.perf_counter_ns())
                continue
            if kind != "raw":
                return (kind, payload)
            # decoding (SSE framing, JSON, base64, WAV) and WAV writing happen here, in the
            # store owner's process, so they never delay the driver's arrival stamps
            records = decode_batch(self.spec, payload)
            self._out.put(("records", self._consume(records) if self._consume else records))
        return None

    def _inflight_rows(self, k: int, rows: list[InflightRow]) -> list[InflightRow]:
        """Shard k's new rows, with the other shards' latest rows (their reads already handed
        over, so they carry none): a live view sees every request in flight."""
        if self.shards == 1:
            return rows
        self._inflight_last[k] = rows
        others = [dataclasses.replace(r, stamps=[], chunks=[])
                  for j, rs in self._inflight_last.items() if j != k for r in rs]
        return rows + others

    def _stop_peers(self) -> None:
        self._cancel.set()
        if self._barrier is not None:
            self._barrier.abort()

    def _outcome(self, finals: list[Final]) -> Outcome:
        if self.shards == 1:
            kind, payload = finals[0]
            if kind == "summary":
                return payload, None
            if kind == "fatal":
                return None, payload
            self._proc.join(5.0)
            return None, f"driver process exited with code {self._proc.exitcode}"
        fatal = None
        for k, (kind, payload) in enumerate(finals):
            who = f"driver shard {k + 1} of {self.shards} (pid {self._procs[k].pid})"
            if kind == "fatal":
                fatal = fatal or f"{who}: {payload}"
            elif kind == "eof":
                self._procs[k].join(5.0)
                fatal = fatal or f"{who} exited with code {self._procs[k].exitcode} before its summary"
        parts = [payload for kind, payload in finals if kind == "summary"]
        if not parts:
            return None, fatal
        cancelled = any(p.cancelled for p in parts) and (self._owner_cancelled or fatal is None)
        return merge_summaries(parts, cancelled=cancelled), fatal

    def join(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        for p in self._procs:
            if p.pid is not None:
                stop_process(p, max(0.0, deadline - time.monotonic()))
        if self._decoder.ident is not None:  # the pipes are at EOF once the children are gone: the thread ends
            self._decoder.join()  # no timeout: the caller may use what `consume` uses once this returns
        for recv, _ in self._pipes:
            recv.close()
