"""How long hashing checkpoints takes per GB (docs/plans.md, "Checkpoints").

A plan's checkpoints are hashed at freeze and at every launch (data/checkpoints.py): SHA-256
streamed in 1 MiB blocks through data/hashing.py, cached by (path, size, mtime). Prints MB/s of
the project's path (first hash, and a repeat served from the digest cache) next to the baseline
measured in the same run: hashlib.sha256 over the same bytes already in memory (the CPU bound).
The file is read from the page cache (written just before); a cold read from disk adds the
disk's own rate on top.

    .venv/bin/python bench/bench_checkpoint_hash.py [--mb 512]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path

from data.checkpoints import hash_files


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=512, help="checkpoint size in MB (1 MB = 2^20 bytes)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "ck.bin"
        block = os.urandom(1 << 20)
        with open(ck, "wb") as f:
            for _ in range(args.mb):
                f.write(block)
        data = ck.read_bytes()
        t0 = time.perf_counter()
        base = hashlib.sha256(data).hexdigest()
        t_base = time.perf_counter() - t0
        del data
        cache = Path(tmp) / "cache.json"
        t0 = time.perf_counter()
        got = hash_files([str(ck)], cache)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        hash_files([str(ck)], cache)
        t_cached = time.perf_counter() - t0
        assert got[str(ck)]["sha256"] == base
    print(f"{args.mb} MB file, page cache")
    print(f"  baseline hashlib.sha256 in memory : {args.mb / t_base:9.0f} MB/s  ({t_base * 1024 / args.mb:.2f} s/GB)")
    print(f"  data.checkpoints.hash_files, first: {args.mb / t_first:9.0f} MB/s  ({t_first * 1024 / args.mb:.2f} s/GB)")
    print(f"  the same file again (digest cache): {t_cached * 1e3:9.2f} ms")


if __name__ == "__main__":
    main()
