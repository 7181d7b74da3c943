"""What keeping one body read costs in-process, llhttp against a raw copy, on a prepared heap.

    python bench/bench_read_path.py [--reads 20000] [--repeats 3]

Each variant runs in a fresh interpreter whose heap is prepared as the driver process's is
(engine_adapters/driver/heap.py), feeding the same 13 KB chunked SSE audio event per read from one
read buffer, as the stamped transport does (docs/performance.md, "Per-event CPU"):
`llhttp` (httptools parses the read, `on_body` keeps the body), `drop` (the same, body dropped)
and `raw` (the read copied out with bytes(view) and its chunk-size line parsed: what raw-mode
reads with de-chunking in the parent would do instead). Prints CPU µs per read for each.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

VARIANT = r"""
import base64, json, os, sys, time
import httptools
from engine_adapters.driver.heap import prepare_heap

prepare_heap(512 << 20)
mode, n_reads = sys.argv[1], int(sys.argv[2])
payload = json.dumps({"modality": "audio", "audio": base64.b64encode(os.urandom(9600)).decode()}).encode()
event = b"data: " + payload + b"\n\n"
chunk = b"%x\r\n" % len(event) + event + b"\r\n"
head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
buf = memoryview(bytearray(256 * 1024))
buf[:len(chunk)] = chunk
n = len(chunk)
now = time.perf_counter_ns
stamps, chunks = [], []


class Keep:
    def on_body(self, body):
        stamps.append(0)
        chunks.append(body)


class Drop:
    def on_body(self, body):
        pass


if mode in ("llhttp", "drop"):
    parser = httptools.HttpResponseParser(Keep() if mode == "llhttp" else Drop())
    parser.feed_data(head)
    t0 = time.process_time()
    for _ in range(n_reads):
        stamp = now()
        parser.feed_data(buf[:n])
else:
    t0 = time.process_time()
    for _ in range(n_reads):
        stamp = now()
        data = bytes(buf[:n])
        stamps.append(stamp)
        chunks.append(data)
        size = int(data[:data.find(b"\r\n")], 16)
print((time.process_time() - t0) / n_reads * 1e6)
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if args.reads < 1 or args.repeats < 1:
        ap.error("--reads and --repeats must be >= 1")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got: dict[str, list[float]] = {"llhttp": [], "drop": [], "raw": []}
    for _ in range(args.repeats):
        for mode in got:
            out = subprocess.run([sys.executable, "-c", VARIANT, mode, str(args.reads)], env=env, check=True,
                                 capture_output=True, text=True, timeout=300)
            got[mode].append(float(out.stdout.strip()))
    for mode, us in got.items():
        print(f"{mode:7s} CPU per read (us): {', '.join(f'{u:.2f}' for u in us)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
