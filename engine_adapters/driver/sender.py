"""The driver process's sending side: a thread that writes messages (wire.py) to the parent's pipe
in order, and the in-flight rows it builds from results the loop is still appending to."""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from typing import Any

from engine_adapters.driver.results import RawResult
from engine_adapters.driver.wire import pack, write_all


class InflightReporter:
    """Builds InflightRows on the sender thread from results the loop thread is still appending
    to. A list only grows and the loop appends a stamp before its bytes, so reading the lengths
    and then the slices below them is safe; only the reads not reported before are sent."""

    def __init__(self) -> None:
        self._sent: dict[int, int] = {}  # request index -> reads already reported

    def rows(self, raws: list[RawResult]) -> tuple[list[tuple[Any, ...]], list[bytes]]:
        """(row metadata as tuples, the new reads' bytes back to back): the wire form of
        InflightRows, built without an object per row (this runs on the driver's sender thread,
        which shares the GIL with the loop)."""
        metas: list[tuple[Any, ...]] = []
        blobs: list[bytes] = []
        sent: dict[int, int] = {}
        for r in raws:
            n = min(len(r.stamps), len(r.chunks))
            k = self._sent.get(r.index, 0)
            sent[r.index] = n
            new = r.chunks[k:n]
            blobs += new
            metas.append((r.index, r.utt_id, r.is_warmup, r.t_send_ns, n, r.stamps[0] if n else None,
                          r.stamps[n - 1] if n else None, r.stamps[k:n], list(map(len, new))))
        self._sent = sent  # requests that ended drop out
        return metas, blobs


class Sender:
    """Writes messages to the parent's pipe on its own thread, in order."""

    def __init__(self, fd: int, trace: bool = False):
        self.fd = fd
        # with `trace`: [taken off the queue, write started, write done] (perf_counter_ns) per
        # message; the GIL is the sender's over the first part (stall_trace.py)
        self.spans: list[list[int]] | None = [] if trace else None
        self.queue: queue_mod.SimpleQueue[tuple[str, Any] | None] = queue_mod.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="driver-sender", daemon=True)
        self.thread.start()

    def put(self, kind: str, payload: Any) -> None:
        self.queue.put((kind, payload))

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def _run(self) -> None:
        reporter = InflightReporter()
        spans, now = self.spans, time.perf_counter_ns
        while (item := self.queue.get()) is not None:
            got = now()
            kind, payload = item
            if kind == "inflight":  # results still being appended to: rows with the new reads
                payload = reporter.rows(payload)
            bufs = pack(kind, payload)
            packed = now()
            write_all(self.fd, bufs)
            if spans is not None:
                spans.append([got, packed, now()])
