"""The record wire format between the driver process and its parent.

One message = header (meta length, blob length) + pickled metadata + the reads' bytes back to
back. Only the small metadata is pickled; the audio bytes go to the kernel by os.writev from a
sender thread (sender.py), which releases the GIL while they are copied, so the driver's event
loop thread is never held up by a big pickle (a 6 MB batch took ~4-6 ms of GIL on the 2-core
dev box). Kinds: "raw" (RawResults), "inflight" (InflightRows), "summary" (DriveSummary),
"fatal" (a one-line error).
"""

from __future__ import annotations

import operator
import os
import pickle
import struct
from dataclasses import fields
from typing import Any

from engine_adapters.driver.results import InflightRow, RawResult

HEADER = struct.Struct("<QQ")
_IOV_MAX = 512
READ_BYTES = 8 << 20  # the parent's read size from the pipe

# RawResult as a flat tuple on the wire: attrgetter builds it in C, so the sender thread holds the
# GIL (which the driver's loop thread needs to stamp) for microseconds per batch, not the
# milliseconds a Python-level copy of each result took at C=128
_RAW_META = tuple(f.name for f in fields(RawResult) if f.name != "chunks")
_raw_meta = operator.attrgetter(*_RAW_META)

Message = tuple[str, Any]


def pack(kind: str, payload: Any) -> list[bytes]:
    """The buffers of one message, in order (for os.writev). An "inflight" payload is the
    (metadata tuples, new bytes) pair InflightReporter.rows builds."""
    blobs: list[bytes] = []
    if kind == "raw":
        metas = []
        for r in payload:
            metas.append((_raw_meta(r), list(map(len, r.chunks))))  # sizes; the bytes follow the metadata
            blobs += r.chunks
        payload = metas
    elif kind == "inflight":  # the new bytes travel like the reads above
        payload, blobs = payload
    meta = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
    return [HEADER.pack(len(meta), sum(map(len, blobs))), meta, *blobs]


def unpack(meta: memoryview, blob: memoryview) -> Message:
    kind, payload = pickle.loads(meta)
    if kind in ("raw", "inflight"):
        off = 0

        def take(sizes: list[int]) -> list[bytes]:
            nonlocal off
            out = []
            for n in sizes:
                out.append(bytes(blob[off:off + n]))
                off += n
            return out

        if kind == "raw":
            payload = [RawResult(**dict(zip(_RAW_META, values)), chunks=take(sizes)) for values, sizes in payload]
        else:
            payload = [InflightRow(index, utt_id, warm, t_send, reads, first, last, stamps, take(sizes))
                       for index, utt_id, warm, t_send, reads, first, last, stamps, sizes in payload]
    return kind, payload


def write_all(fd: int, bufs: list[bytes]) -> None:
    """os.writev until every byte is out (a pipe write may be partial)."""
    views = [memoryview(b) for b in bufs if len(b)]
    i = 0
    while i < len(views):
        n = os.writev(fd, views[i:i + _IOV_MAX])
        while n:
            if n >= len(views[i]):
                n -= len(views[i])
                i += 1
            else:
                views[i], n = views[i][n:], 0


class MessageReader:
    """The parent's end of one pipe: bytes read so far, cut into whole messages."""

    def __init__(self, fd: int):
        self.fd = fd
        self._buf = bytearray()

    def next_message(self) -> Message | None:
        """Take the first complete message out of the buffer, else None."""
        buf = self._buf
        if len(buf) < HEADER.size:
            return None
        meta_len, blob_len = HEADER.unpack_from(buf)
        end_meta = HEADER.size + meta_len
        size = end_meta + blob_len
        if len(buf) < size:
            return None
        view = memoryview(buf)
        try:
            msg = unpack(view[HEADER.size:end_meta], view[end_meta:size])
        finally:
            view.release()
        del buf[:size]
        return msg

    def fill(self) -> bool:
        """Read what the pipe holds into the buffer (blocking); False at EOF (the child is gone)."""
        data = os.read(self.fd, READ_BYTES)
        self._buf += data
        return bool(data)
