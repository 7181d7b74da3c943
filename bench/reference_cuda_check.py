#!/usr/bin/env python3
"""Start the reference engine (default ``--device cuda``), sweep concurrency over the sample workload,
and print what happened: throughput, TTFA, RTF per level, and -- on a GPU -- what NVML saw.

    python bench/reference_cuda_check.py                      # on the GPU host
    python bench/reference_cuda_check.py --device cpu         # same sweep, no GPU work
    python bench/reference_cuda_check.py --concurrency 1,8,32 --requests 64 --profile fast

Expected on a GPU: utilisation and power rise with concurrency up to the profile's
max_num_seqs and stay flat beyond it, like throughput. Where no CUDA GPU exists the
engine refuses to start with a one-line error, which this script prints (exit 2).
This is a check script, not a timed test; it drives the engine with its own small
SSE client so it depends on nothing but the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data.workload import load_workload  # noqa: E402


@dataclass
class RequestResult:
    ok: bool
    audio_s: float
    ttfa_s: float
    rtf: float
    error: str = ""


@dataclass
class GpuSample:
    t: float
    util: int
    power_w: float
    sm_mhz: int
    mem_used_gib: float


def launch(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str, list[str]]:
    argv = [sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni", "--profile", args.profile,
            "--device", args.device, "--port", "0"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line.rstrip())
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + args.startup_timeout
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            raise SystemExit(f"engine did not start within {args.startup_timeout}s:\n" + "\n".join(output))
        if line is None:
            print("\n".join(output), file=sys.stderr)
            raise SystemExit(2)
        if line.startswith("listening on "):
            url = line.split()[2]
            break
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url, output
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            print("\n".join(output), file=sys.stderr)
            raise SystemExit(2)
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"engine not healthy within {args.startup_timeout}s:\n" + "\n".join(output))


class NvmlSampler:
    """10 Hz NVML samples of GPU 0 on a fixed deadline schedule (nothing if NVML is unavailable)."""

    def __init__(self, period_s: float = 0.1) -> None:
        self.samples: list[GpuSample] = []
        self._period = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.name = pynvml.nvmlDeviceGetName(self._handle)
        except Exception as exc:  # noqa: BLE001 - any NVML failure just disables sampling
            self._nvml = None
            self.name = f"NVML unavailable ({type(exc).__name__})"

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def start(self) -> None:
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        nv, h = self._nvml, self._handle
        next_t = time.perf_counter()
        while not self._stop.is_set():
            self.samples.append(GpuSample(
                t=time.perf_counter(), util=nv.nvmlDeviceGetUtilizationRates(h).gpu,
                power_w=nv.nvmlDeviceGetPowerUsage(h) / 1000, sm_mhz=nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                mem_used_gib=nv.nvmlDeviceGetMemoryInfo(h).used / 2**30))
            next_t += self._period
            self._stop.wait(max(0.0, next_t - time.perf_counter()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def window(self, t0: float, t1: float) -> list[GpuSample]:
        return [s for s in self.samples if t0 <= s.t <= t1]


def body_for(utt, model: str) -> dict:
    uri = "data:audio/wav;base64," + base64.b64encode(utt.prompt_wav.read_bytes()).decode()
    return {"model": model, "stream": True, "modalities": ["text", "audio"], "seed": 0,
            "messages": [{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": uri}},
                                                      {"type": "text", "text": utt.target_text}]}]}


async def one_request(client: httpx.AsyncClient, url: str, body: dict) -> RequestResult:
    t_send = time.perf_counter()
    ttfa = None
    t_last = t_send
    samples = 0
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                return RequestResult(False, 0, 0, 0, f"HTTP {resp.status_code}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                now = time.perf_counter()
                event = json.loads(line[6:])
                if "error" in event:
                    return RequestResult(False, samples / 24000, 0, 0, "in-stream error")
                if event.get("modality") == "audio":
                    wav = base64.b64decode(event["choices"][0]["delta"]["content"])
                    samples += (len(wav) - 44) // 2
                    ttfa = now - t_send if ttfa is None else ttfa
                    t_last = now
    except httpx.HTTPError as exc:
        return RequestResult(False, samples / 24000, 0, 0, type(exc).__name__)
    audio_s = samples / 24000
    if not audio_s:
        return RequestResult(False, 0, 0, 0, "no audio")
    return RequestResult(True, audio_s, ttfa or 0.0, (t_last - t_send) / audio_s)


async def run_level(url: str, bodies: list[dict], concurrency: int) -> tuple[list[RequestResult], float]:
    """Closed loop: ``concurrency`` workers take the next request as soon as their last one ends."""
    todo: asyncio.Queue[dict] = asyncio.Queue()
    for b in bodies:
        todo.put_nowait(b)
    results: list[RequestResult] = []
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits) as client:
        async def worker() -> None:
            while not todo.empty():
                results.append(await one_request(client, url, todo.get_nowait()))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return results, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--profile", default="baseline")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32")
    parser.add_argument("--requests", type=int, default=0,
                        help="requests per level (default: max(16, 4 x concurrency), at most the 128 utterances)")
    parser.add_argument("--startup-timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    utts = load_workload().utterances

    sampler = NvmlSampler()
    proc, url, output = launch(args)
    print(f"engine: {url}  device={args.device} profile={args.profile}")
    print("\n".join(f"  | {line}" for line in output))
    sampler.start()
    try:
        warm = [body_for(u, "reference-tts") for u in utts]
        print(f"warming up: rendering all {len(warm)} utterances once (synthesis is cached per request)...")
        asyncio.run(run_level(url, warm, 16))
        header = (f"{'C':>3} {'reqs':>4} {'fail':>4} {'wall s':>7} {'audio s/s':>9} {'tok/s':>7} "
                  f"{'TTFA p50':>8} {'TTFA p95':>8} {'RTF mean':>8}")
        if sampler.available and args.device == "cuda":
            header += f" {'util avg':>8} {'util max':>8} {'W max':>6} {'SM MHz min':>10}"
        print(header)
        for c in levels:
            n = args.requests or min(len(utts), max(16, 4 * c))
            bodies = [body_for(utts[i % len(utts)], "reference-tts") for i in range(n)]
            t0 = time.perf_counter()
            results, wall = asyncio.run(run_level(url, bodies, c))
            t1 = time.perf_counter()
            ok = [r for r in results if r.ok]
            audio = sum(r.audio_s for r in ok)
            ttfa = np.array([r.ttfa_s for r in ok]) * 1000
            line = (f"{c:>3} {len(results):>4} {len(results) - len(ok):>4} {wall:>7.2f} {audio / wall:>9.1f} "
                    f"{25 * audio / wall:>7.0f} {np.percentile(ttfa, 50):>6.0f}ms {np.percentile(ttfa, 95):>6.0f}ms "
                    f"{np.mean([r.rtf for r in ok]):>8.3f}")
            window = sampler.window(t0, t1)
            if window and args.device == "cuda":
                line += (f" {np.mean([s.util for s in window]):>8.1f} {max(s.util for s in window):>8d} "
                         f"{max(s.power_w for s in window):>6.0f} {min(s.sm_mhz for s in window):>10d}")
            print(line, flush=True)
        stats = httpx.get(f"{url}/stats", timeout=5).json()
        print("engine /stats:", json.dumps(stats, indent=1))
        if args.device == "cuda":
            print(f"NVML: {sampler.name}, {len(sampler.samples)} samples at 10 Hz")
    finally:
        sampler.stop()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
