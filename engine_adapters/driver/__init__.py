"""The streaming load driver: closed-loop concurrency over an ordered request list, in its own
process with its own event loop, so nothing else in the console can delay its timestamps.

Timing: `t_send_ns` is stamped just before the request is handed to the client; every body
read is stamped with `perf_counter_ns()` before any parsing and events take the stamp of the
read that delivered their first byte (see dialects/base.py). With the default transport the
stamp is taken inside the connection's `buffer_updated` callback and the hot path runs right
there (transport.py): "stamp -> append stamp and bytes" plus two C-speed tail checks (end marker,
event-size guard). SSE framing, JSON, base64 and WAV decoding all happen in the parent process,
on a thread at idle priority (DriverProcess), so they never take a core from the driver. Batches
leave the driver process through a pipe written by a sender thread with `os.writev` (the GIL is
released while the kernel copies the audio bytes; the metadata is packed in C); pickling them on
a multiprocessing.Queue held the GIL for milliseconds per batch and showed up as arrival-stamp
delay (bench/bench_timing_fidelity.py).

Closed loop: C workers each take the next request as soon as their previous one ends, so exactly
C requests are in flight until the list is exhausted. Warmup requests (flagged `is_warmup`) run
first, as their own closed-loop phase, so they never overlap measured requests.

Every request that was sent yields exactly one RequestRecord, whatever happens (timeout,
transport failure, cancellation), so requests sent = requests stored.

One module per concept:

- spec.py: RequestSpec, DriveSpec (what to drive)
- results.py: RawResult, InflightRow, DriveSummary (what the driver process hands back)
- client_loop.py: the asyncio client loop (DriveLoop, drive_raw, drive_in_process)
- decode.py: undecoded results into records and WAV files (parent side)
- overhead.py: the driver's measurement of itself (loop lag, collector pauses)
- heap.py: the driver process's heap, pre-touched and never trimmed during the drive
- answers.py: one line from an error body or an unexpected 2xx answer
- wire.py: the message format on the pipe from the driver process to the parent
- sender.py: the driver process's sender thread and in-flight rows
- child.py: the driver process's entry point
- process.py: DriverProcess, the parent's handle on a drive
- warm.py: a driver process started ahead of its run (prewarm)
- priority.py: idle priority for the parent's decode and UI threads
- stop.py: ending a driver process
"""

from __future__ import annotations

from engine_adapters.driver.client_loop import (FLUSH_S, GC_VALVE, INFLIGHT_S, TICK_S, DriveLoop, drive_in_process,
                                                drive_raw, new_event_loop)
from engine_adapters.driver.child import SWITCH_INTERVAL_S
from engine_adapters.driver.decode import audio_relpath, decode_batch, decode_result
from engine_adapters.driver.priority import idle_priority
from engine_adapters.driver.process import DriverProcess
from engine_adapters.driver.results import DriveSummary, InflightRow, RawResult
from engine_adapters.driver.sender import InflightReporter
from engine_adapters.driver.spec import DriveSpec, RequestSpec
from engine_adapters.driver.warm import _WARM, WarmDriver, discard_warm, prewarm

__all__ = ["FLUSH_S", "GC_VALVE", "INFLIGHT_S", "SWITCH_INTERVAL_S", "TICK_S", "DriveLoop", "DriveSpec", "DriveSummary",
           "DriverProcess", "InflightReporter", "InflightRow", "RawResult", "RequestSpec", "WarmDriver", "_WARM",
           "audio_relpath", "decode_batch", "decode_result", "discard_warm", "drive_in_process", "drive_raw",
           "idle_priority", "new_event_loop", "prewarm"]
