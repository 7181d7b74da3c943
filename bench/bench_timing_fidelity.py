"""Timing fidelity of the load driver: per concurrency C, the p50/p99 of (client arrival stamp -
engine emit stamp) over every audio event, for the console's driver (own process, uvloop,
stamp-before-parse) and for a plain aiohttp client written the way `vllm bench serve` reads
streams (iterate response.content lines, stamp after line splitting/decoding), measured in the
same run against the same reference engine (which stamps `emit_ns` right before each write).

    .venv/bin/python bench/bench_timing_fidelity.py [--concurrencies 1,8,32,128] [--clients stamped,aiohttp] [--repeats N]

--clients lists the driver transports to measure (the first is the one the ratio column compares
with plain; default: the driver's default transport). With --repeats N every C is measured N times
(the clients and plain alternate) and the table shows the median of each figure over the repeats,
which steadies it on a shared, noisy box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import struct
import sys
import tempfile
import time
import wave
from contextlib import nullcontext
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine_adapters.dialects import get_dialect  # noqa: E402
from console.live import LiveFeed  # noqa: E402
from console.recording import record_run  # noqa: E402
from data.store import open_store  # noqa: E402
from engine_adapters.driver import DriveSpec, RequestSpec  # noqa: E402
from engine_adapters.lifecycle import EngineProcess  # noqa: E402
from engine_adapters.transport import DEFAULT_TRANSPORT, TRANSPORTS  # noqa: E402
from engine_adapters.specs import EngineSpec  # noqa: E402

# every sequence decodes together (no queueing), one 1 s chunk (48 KB WAV, ~64 KB base64) per step
PROFILE = """
[profiles.fidelity]
inherits = "baseline"
description = "timing-fidelity bench: wide batch, synchronised 1 s chunks"
max_num_seqs = 512
prefill_s = 0.02
step_base_s = 0.08
step_per_seq_s = 0.0005
"""
TEXTS = ["The quick brown fox jumps over the lazy dog near the quiet river bank today.",
         "Measurements are only as good as the clock that takes them and the code around it."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompt_wav(path: Path) -> Path:
    """A voiced-sounding 1.5 s prompt (harmonics of 130 Hz) so the engine can estimate a pitch."""
    t = np.arange(int(1.5 * 24000)) / 24000
    x = sum(np.sin(2 * np.pi * 130 * k * t) / k for k in range(1, 8)) * 0.2
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(24000)
        w.writeframes((x * 32767).astype("<i2").tobytes())
    return path


def start_engine(tmp: Path, dialect: str = "vllm-omni", profile: str = "fidelity", profiles_file: Path | None = None) -> EngineProcess:
    port = free_port()
    argv = [sys.executable, "-m", "engine_adapters.reference", "--dialect", dialect, "--profile", profile,
            "--port", str(port)]
    if profiles_file:
        argv += ["--profiles-file", str(profiles_file)]
    eng = EngineProcess(EngineSpec("reference", "reference", dialect, argv=tuple(argv), port=port,
                                   health_timeout_s=120), tmp / "logs")
    eng.start()
    eng.wait_healthy()
    return eng


def driver_deltas(url: str, c: int, n: int, prompt: Path, tmp: Path, client: str, live: bool = False) -> list[int]:
    """The driver as the console runs it: `record_run` into a DuckDB file (decoding, WAV writing
    and store writes in this process while the driver process stamps), deltas read back by SQL;
    with `live`, a LiveFeed follows the run as under `campaign run` (in-flight reports included)."""
    reqs = [RequestSpec(f"s{i % 2}-{i}", TEXTS[i % 2], prompt) for i in range(n)]
    run_id = f"fid-c{c}-{client}-{time.monotonic_ns()}"
    spec = DriveSpec(run_id, url, "vllm-omni", c, reqs, timeout_s=120, artifacts_dir=tmp / "art",
                     request_options={"client": client})
    with open_store(tmp / "fidelity.duckdb") as store, (LiveFeed(tmp / "fidelity.duckdb") if live else nullcontext()) as feed:
        record_run(store, spec, engine="reference", kind="exploratory", telemetry=False, live=feed)
        rows = store.query("SELECT t_arrival_ns - server_emit_ns AS d FROM chunks WHERE run_id = ? "
                           "AND kind = 'audio' AND server_emit_ns IS NOT NULL", [run_id])
    return [r["d"] for r in rows]


async def _plain(url: str, c: int, bodies: list[bytes]) -> list[int]:
    import aiohttp

    deltas: list[int] = []
    queue = list(bodies)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c),
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        async def worker():
            while queue:
                body = queue.pop()
                async with session.post(url + "/v1/chat/completions", data=body,
                                        headers={"content-type": "application/json"}) as response:
                    async for chunk_bytes in response.content:  # as vllm bench serve reads streams
                        chunk_bytes = chunk_bytes.strip()
                        if not chunk_bytes:
                            continue
                        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                        if chunk == "[DONE]":
                            continue
                        timestamp = time.perf_counter_ns()
                        data = json.loads(chunk)
                        if data.get("modality") == "audio" and "emit_ns" in data:
                            deltas.append(timestamp - data["emit_ns"])
        await asyncio.gather(*(worker() for _ in range(c)))
    return deltas


def _plain_child(url: str, c: int, bodies: list[bytes], out) -> None:
    out.put(asyncio.run(_plain(url, c, bodies)))


def plain_deltas(url: str, c: int, n: int, prompt: Path) -> list[int]:
    d = get_dialect("vllm-omni")
    bodies = [json.dumps(d.build_body(TEXTS[i % 2], str(prompt), None)).encode() for i in range(n)]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_plain_child, args=(url, c, bodies, q))
    p.start()
    res = q.get(timeout=600)
    p.join(30)
    return res


def pct(d: list[int]) -> tuple[float, float, int]:
    a = np.asarray(d, dtype=float) / 1e6
    return float(np.percentile(a, 50)), float(np.percentile(a, 99)), a.size


def measure(concurrencies: list[int], client: str | list[str] = DEFAULT_TRANSPORT, requests_per_c=None,
            plain: bool = True, repeats: int = 1, live: bool = False) -> dict[int, dict[str, tuple]]:
    """Per C: {"driver": (p50, p99, n), "plain": ...}, each figure the median over `repeats`; with
    several clients the first is "driver" and the others "driver:<name>"."""
    clients = [client] if isinstance(client, str) else list(client)
    runs: dict[int, dict[str, list[tuple]]] = {}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        prof = tmp / "profiles.toml"
        prof.write_text(PROFILE)
        prompt = prompt_wav(tmp / "prompt.wav")
        eng = start_engine(tmp, profiles_file=prof)
        try:
            for _ in range(repeats):
                for c in concurrencies:
                    n = (requests_per_c or {}).get(c, max(32, c))  # >= ~200 audio events per C: p99 is not the max
                    got = runs.setdefault(c, {})
                    for k, cl in enumerate(clients):
                        key = "driver" if k == 0 else f"driver:{cl}"
                        got.setdefault(key, []).append(pct(driver_deltas(eng.spec.url, c, n, prompt, tmp, cl, live)))
                    if plain:
                        got.setdefault("plain", []).append(pct(plain_deltas(eng.spec.url, c, n, prompt)))
        finally:
            eng.stop()
    out: dict[int, dict[str, tuple]] = {}
    for c, got in runs.items():
        out[c] = {who: tuple(float(np.median(col)) for col in zip(*vals)) for who, vals in got.items()}
        if plain:  # the same repeat's driver and plain p99, paired: the worst pair is the claim to check
            out[c]["worst_p99_ratio"] = (max(d[1] / p[1] for d, p in zip(got["driver"], got["plain"])),)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrencies", default="1,8,32,128")
    ap.add_argument("--clients", default=DEFAULT_TRANSPORT,
                    help=f"comma-separated driver transports from {', '.join(TRANSPORTS)}; the first is compared with plain")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--live", action="store_true", help="drive with a LiveFeed attached, as `campaign run` does")
    args = ap.parse_args()
    cs = [int(x) for x in args.concurrencies.split(",")]
    clients = [x.strip() for x in args.clients.split(",") if x.strip()]
    bad = [x for x in clients if x not in TRANSPORTS]
    if bad or not clients:
        ap.error(f"--clients: unknown transport {bad[0] if bad else '(none)'!r}; choose from {', '.join(TRANSPORTS)}")
    res = measure(cs, clients, repeats=args.repeats, live=args.live)
    print(f"arrival - emit (ms), audio events{'; live feed attached' if args.live else ''}; median of {args.repeats} repeat(s); ratio = {clients[0]} p99 / plain p99 "
          f"(median figures; worst = the highest ratio within one repeat)")
    cols = [("driver", clients[0])] + [(f"driver:{cl}", cl) for cl in clients[1:]] + [("plain", "plain")]
    print(f"{'C':>5} " + " ".join(f"{name + ' p50':>14} {name + ' p99':>14}" for _, name in cols) + f" {'events':>8} {'p99 ratio':>9} {'worst':>6}")
    for c, r in res.items():
        dp99, pp99 = r["driver"][1], r["plain"][1]
        print(f"{c:>5} " + " ".join(f"{r[key][0]:>14.3f} {r[key][1]:>14.3f}" for key, _ in cols)
              + f" {int(r['driver'][2]):>8} {dp99 / pp99 if pp99 else float('nan'):>9.2f} {r['worst_p99_ratio'][0]:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
