"""The driver's per-read hot path (engine_adapters/driver/client_loop.py, DriveLoop._sink): it stops
at the SSE end marker however the stream is cut into reads, and only there, exactly where the
plain regex over the last 64 bytes would (the endswith pre-check only skips reads that cannot end
with the marker)."""

from __future__ import annotations

import random
import re

import pytest

from engine_adapters.driver.client_loop import DriveLoop
from engine_adapters.driver.results import RawResult
from engine_adapters.driver.spec import DriveSpec

_DONE_TAIL = re.compile(rb"(?:\A|\n)data: ?\[DONE\]\r?\n\r?\n\Z")


def _reference_stop(reads: list[bytes]) -> int | None:
    """The read after which the sink must stop: the regex over the stream's last 64 bytes."""
    seen = b""
    for k, data in enumerate(reads):
        seen += data
        if seen and _DONE_TAIL.search(seen[-64:]):
            return k
    return None


def _sink_stop(reads: list[bytes]) -> int | None:
    loop = DriveLoop(DriveSpec("x", "http://127.0.0.1:1", "vllm-omni", 1, []), lambda batch: None)
    sink = loop._sink(RawResult(0, "u", False, 0))
    for k, data in enumerate(reads):
        if sink(k, data):
            return k
    return None


STREAMS = [
    b'data: {"modality": "audio", "x": 1}\n\n' * 3 + b"data: [DONE]\n\n",
    b'data: {"modality": "audio"}\r\n\r\n' + b"data:[DONE]\r\n\r\n",
    b'data: {"a": "[DONE]"}\n\n' + b'data: {"b": "data: [DONE]"}\n\n',  # the marker text inside JSON: no stop
    b'data: {"modality": "text"}\n\n' + b"data: [DONE]\n\r\n",
    b'data: {"m": 1}\n\n' + b"data: [DONE]\r\n\n" + b"data: x\n\n",
    b"data: [DONE]\n\n",
    b'data: {"m": "' + b"A" * 200 + b'"}\n\n' + b"data: [DONE]\n\n",
    b'data: {"m": 2}\n\n' + b"xdata: [DONE]\n\n",  # not at an event boundary: no stop
]


@pytest.mark.parametrize("stream", STREAMS)
def test_sink_stops_where_the_regex_does_however_the_reads_fall(stream):
    rng = random.Random(len(stream))
    splits = [[stream], [bytes([b]) for b in stream]]
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(1, 6))))
        splits.append([stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])])
    for reads in splits:
        assert _sink_stop(reads) == _reference_stop(reads), reads
