"""The host's floor under any client's timing: how late a sleeping reader sees bytes written to it.

    python bench/bench_wakeup_latency.py [--readers 15] [--sockets 68] [--rate 8700]
        [--seconds 8] [--size 13000] [--modes sleep,spin] [--json PATH]

No engine, no driver, no asyncio: one writer process sends fixed-size messages over loopback TCP
round robin to `readers` processes holding `sockets` connections each (the fidelity bench's
1,024-stream shape: 15 driver processes x 68 streams, ~8,700 audio events/s of ~13 KB). Each
message starts with the writer's perf_counter_ns taken just before its send(); a reader stamps
perf_counter_ns (CLOCK_MONOTONIC, one clock for every process) when the message's last byte is
read, and the latency is the difference, like the fidelity bench's arrival - emit skew.

Two reader modes, same load:
- `sleep`: the reader blocks in epoll until a socket is readable, as an event loop does.
- `spin`: the reader polls epoll with a zero timeout and never sleeps, so its CPU never idles.

If `sleep` shows late messages that `spin` does not, the lateness is the wake-up of an idle CPU
(in a VM, resuming a halted vCPU), which no client that sleeps can remove; if both show them, it
is the host taking CPUs away. The figures also give the steal time /proc/stat counted over each
mode (docs/performance.md, "The host's wake-up floor").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import select
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine_adapters.driver.overhead import HostSteal  # noqa: E402

STAMP = struct.Struct("<q")


def reader(port: int, sockets: int, size: int, mode: str, out: mp.Queue) -> None:
    """Connect `sockets` times, then read until the writer closes; put the latencies (ns) on `out`."""
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(sockets)]
    ep = select.epoll()
    got: dict[int, bytearray] = {}
    for c in conns:
        c.setblocking(False)
        ep.register(c.fileno(), select.EPOLLIN)
        got[c.fileno()] = bytearray()
    by_fd = {c.fileno(): c for c in conns}
    lat: list[int] = []
    open_fds = set(by_fd)
    timeout = -1 if mode == "sleep" else 0
    now = time.perf_counter_ns
    while open_fds:
        for fd, _ in ep.poll(timeout):
            try:
                data = by_fd[fd].recv(1 << 20)
            except BlockingIOError:
                continue
            t = now()
            if not data:
                ep.unregister(fd)
                open_fds.discard(fd)
                continue
            buf = got[fd]
            buf += data
            while len(buf) >= size:
                lat.append(t - STAMP.unpack_from(buf)[0])
                del buf[:size]
    out.put(lat)


def writer(listener: socket.socket, n_conns: int, size: int, rate: float, seconds: float, out: mp.Queue) -> None:
    """Accept `n_conns`, then send one message every 1/rate s round robin (on a nominal timeline,
    like the reference engine's steps); put (messages, send-call gaps ns) on `out`."""
    conns = []
    for _ in range(n_conns):
        c, _ = listener.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(c)
    pad = bytes(size - STAMP.size)
    period = 1e9 / rate
    start = time.perf_counter_ns() + 200_000_000  # the readers are in their loops by then
    end = start + int(seconds * 1e9)
    gaps: list[int] = []
    k = 0
    while True:
        due = start + int(k * period)
        if due >= end:
            break
        while (t := time.perf_counter_ns()) < due:
            if due - t > 200_000:
                time.sleep((due - t - 100_000) / 1e9)
        c = conns[k % n_conns]
        t0 = time.perf_counter_ns()
        c.sendall(STAMP.pack(t0) + pad)
        gaps.append(time.perf_counter_ns() - t0)
        k += 1
    for c in conns:
        c.close()
    out.put((k, gaps))


def run_mode(mode: str, readers: int, sockets: int, size: int, rate: float, seconds: float) -> dict:
    ctx = mp.get_context("fork")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(readers * sockets)
    port = listener.getsockname()[1]
    q: mp.Queue = ctx.Queue()
    wq: mp.Queue = ctx.Queue()
    w = ctx.Process(target=writer, args=(listener, readers * sockets, size, rate, seconds, wq))
    w.start()
    rs = [ctx.Process(target=reader, args=(port, sockets, size, mode, q)) for _ in range(readers)]
    for r in rs:
        r.start()
    steal, t0 = HostSteal(), time.monotonic()
    lat = np.concatenate([np.asarray(q.get(), dtype=np.int64) for _ in rs]) / 1e6
    sent, gaps = wq.get()
    wall = time.monotonic() - t0
    stolen = steal.summary()
    for p in (w, *rs):
        p.join()
    listener.close()
    gaps_ms = np.asarray(gaps, dtype=np.int64) / 1e6
    return {"mode": mode, "messages": int(lat.size), "sent": sent,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "p999_ms": float(np.percentile(lat, 99.9)), "max_ms": float(lat.max()),
            "over_1ms": int((lat > 1).sum()), "over_2ms": int((lat > 2).sum()),
            "send_gap_max_ms": float(gaps_ms.max()),
            "steal_ms": stolen["ms"] if stolen else None, "steal_max_cpu_ms": stolen["max_cpu_ms"] if stolen else None,
            "wall_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readers", type=int, default=15)
    ap.add_argument("--sockets", type=int, default=68, help="connections per reader process")
    ap.add_argument("--rate", type=float, default=8700.0, help="messages per second, all readers together")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--size", type=int, default=13000, help="bytes per message (a 0.2 s audio event is ~13 KB)")
    ap.add_argument("--modes", default="sleep,spin")
    ap.add_argument("--repeats", type=int, default=1, help="each mode this many times, alternating")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if bad := [m for m in modes if m not in ("sleep", "spin")]:
        print(f"--modes: unknown mode {bad[0]!r} (sleep, spin)", file=sys.stderr)
        return 2
    results = []
    for rep in range(args.repeats):
        for mode in modes:
            r = run_mode(mode, args.readers, args.sockets, args.size, args.rate, args.seconds)
            r["repeat"] = rep + 1
            results.append(r)
            print(f"repeat {rep + 1} {mode:5s}: {r['messages']} messages, p50 {r['p50_ms']:.3f} ms, "
                  f"p99 {r['p99_ms']:.3f}, p99.9 {r['p999_ms']:.3f}, max {r['max_ms']:.3f}, "
                  f">1 ms {r['over_1ms']}, >2 ms {r['over_2ms']}, writer send max {r['send_gap_max_ms']:.3f} ms, "
                  f"steal {r['steal_ms']} ms over {r['wall_s']} s", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "command": "python bench/bench_wakeup_latency.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "readers": args.readers, "sockets": args.sockets, "rate": args.rate, "size": args.size,
            "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
