"""The driver process's entry point: wait for its drive (when started warm), set the GIL switch
interval, run the drive with the collector frozen and ship everything through the sender."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from engine_adapters.driver.client_loop import drive_raw
from engine_adapters.driver.sender import Sender
from engine_adapters.driver.shards import ShardRole
from engine_adapters.driver.spec import DriveSpec

SWITCH_INTERVAL_S = 0.0002  # the driver process's GIL switch interval (see child_main)


def child_main(spec: DriveSpec | None, conn: Any, cancel_evt: Any, report_inflight: bool = False,
               control: Any = None, shard: ShardRole | None = None) -> None:
    """Run one drive (or, with `shard`, its part of a sharded drive) and ship everything on `conn`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and asks via cancel_evt
    if control is not None:  # a warm driver (WarmDriver): imported, now waiting for its drive
        try:
            spec, report_inflight = control.recv()
        except EOFError:  # never used: the owner closed the control pipe
            conn.close()
            return
        control.close()
    assert spec is not None
    pin = spec.cpus[(shard.index if shard is not None else 0) % len(spec.cpus)] if spec.cpus else None
    unpinned = None
    if pin is not None:  # before the sender thread starts, so it inherits the pin
        try:
            os.sched_setaffinity(0, {pin})
        except OSError as exc:  # e.g. a CPU outside this container's cpuset: the drive fails saying so
            unpinned = f"cpus: cannot run on CPU {pin}: {exc.strerror or exc}"
    # when the loop thread wakes with data while the sender thread runs Python code, it waits for
    # the GIL up to the switch interval (5 ms by default) before the sender is made to yield
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    sender = Sender(conn.fileno(), trace=spec.trace_stalls)
    try:
        if unpinned:
            raise ValueError(unpinned)
        summary = drive_raw(spec, lambda batch: sender.put("raw", batch), cancel_evt.is_set,
                            (lambda raws: sender.put("inflight", raws)) if report_inflight else None,
                            freeze_gc=True, shard=shard)  # the driver process only: freezing is for the process's life
    except BaseException as exc:  # report, never hang the parent
        sender.put("fatal", f"{type(exc).__name__}: {exc}")
    else:
        if sender.spans is not None and "trace" in summary.overhead:  # the spans written so far
            summary.overhead["trace"]["sender"] = list(sender.spans)
        sender.put("summary", summary)
    finally:
        sender.close()
        conn.close()
