"""Timing fidelity of the load driver: per concurrency C, (client arrival stamp - engine emit stamp)
over every audio event, for the console's driver (own process, uvloop, stamp-before-parse, stored
through `record_run` into DuckDB exactly as `campaign run` does) and for a plain aiohttp client
written the way `vllm bench serve` reads streams, alternating against the same reference engine
(which stamps `emit_ns` right before each write). Next to every figure: how many streams were live
at once, the audio-event rate, and the engine's own schedule slip over the same run (its /stats),
so client delay can be told from engine delay (docs/performance.md).

    python bench/bench_timing_fidelity.py [--profile wide] [--concurrencies 64 256 1024] [--repeats N]
        [--clients stamped,aiohttp] [--shards 1,4,8] [--sends-per-pass 8,100000] [--live] [--pin]
        [--waves 2] [--json PATH]

Without --profile the engine runs the synthetic `fidelity` profile (every sequence decodes
together, one 1 s chunk per step, C = 1, 8, 32, 128 by default). Each repeat measures every C,
the driver client(s) then the plain client; the table shows the median of each figure over the
repeats (max skew and loop lag: the highest), and the last line the worst paired p99 ratio
(driver / plain within one repeat). With several --shards values every driver client runs once per
value (labelled CLIENT/kK), so one call compares one driver process with K of them
(engine_adapters/driver/shards.py); several --sends-per-pass values do the same for the driver's
per-pass send budget (labelled CLIENT/pN; engine_adapters/driver/pacing.py). The first variant is
the one paired with plain. `opening` is how long the run took to send its first C requests.
A run in which any request failed (the driver's stored outcome, the plain client's exception) covers
fewer streams than asked for: it gets an INCOMPLETE line after the table and the bench exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import socket
import sys
import tempfile
import time
import urllib.request
import wave
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from console.live import LiveFeed  # noqa: E402
from console.recording import record_run  # noqa: E402
from data.store import open_store  # noqa: E402
from engine_adapters.dialects import get_dialect  # noqa: E402
from engine_adapters.driver import DriveSpec, RequestSpec  # noqa: E402
from engine_adapters.driver.spec import SENDS_PER_PASS  # noqa: E402
from engine_adapters.driver.overhead import HostSteal, cpu_us_per_event  # noqa: E402
from stats.metrics import run_metrics  # noqa: E402
from engine_adapters.driver.shards import check_shards, slot_shard  # noqa: E402
from engine_adapters.driver.stall_trace import explain_gap  # noqa: E402
from engine_adapters.lifecycle import EngineProcess  # noqa: E402
from data.plan_model import EngineSpec  # noqa: E402
from engine_adapters.transport import TRANSPORTS  # noqa: E402
from engine_adapters.transport_names import DEFAULT_TRANSPORT  # noqa: E402

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
DEFAULT_CS = {None: [1, 8, 32, 128], "wide": [64, 256, 1024]}
CEILING_MS = 1.0  # the client's ceiling: the event rate at which the driver's p99 first exceeds this


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


@dataclass
class Side:
    """One client's run: skews (ns) of its audio events, their arrivals, its requests' spans."""
    deltas: list[int]
    arrivals: list[int]
    spans: list[tuple[int, int]]  # (t_send_ns, t_end_ns) per request
    cpu_s: float
    t0: int
    t1: int
    loop_lag_max_ms: float | None = None
    gc: dict | None = None
    shards: int = 1  # driver processes the drive ran in
    start_spread_ms: float | None = None  # between the shards' first sends' start instants
    engine: dict = field(default_factory=dict)  # the engine's schedule over [t0, t1]
    failed: dict[str, int] = field(default_factory=dict)  # failure class -> requests that did not complete
    loop_lag_worst: list[list[float]] = field(default_factory=list)  # the driver's [instant ns, ms], worst first
    loop_lag_teardown_max_ms: float | None = None  # probes after the drive's requests had ended (docs/timing.md)
    deferred_sends: int | None = None  # sends the driver's pacer put off to a later loop pass
    runqueue: dict | None = None  # the driver's loop thread(s) ready but off a CPU (docs/timing.md)
    event_shards: list[int] = field(default_factory=list)  # per audio event (as `deltas`): the driver process that read it
    shard_reads: dict[int, np.ndarray] = field(default_factory=dict)  # driver process -> its sorted distinct read stamps
    steal: dict | None = None  # the hypervisor's steal over the run (HostSteal: ms, max_cpu_ms)
    traces: list[dict] = field(default_factory=list)  # per driver process, with --trace: its gaps and sender spans (stall_trace.py)


def opening_ms(spans: list[tuple[int, int]], c: int) -> float:
    """From a run's first send to its C-th: how long the closed loop's opening took to go out."""
    sends = sorted(s for s, _ in spans)[:c]
    return (sends[-1] - sends[0]) / 1e6 if sends else float("nan")


def driver_side(url: str, c: int, reqs: list[RequestSpec], tmp: Path, client: str, live: bool = False,
                shards: int | str = 1, cpus: tuple[int, ...] = (), sends_per_pass: int = SENDS_PER_PASS,
                store_threads: int | None = 1, trace: bool = False, busy_poll_us: int = 0) -> Side:
    """The driver as the console runs it: `record_run` into a DuckDB file (decoding, WAV writing
    and store writes in this process while the driver process(es) stamp), figures read back by SQL;
    with `live`, a LiveFeed follows the run as under `campaign run` (in-flight reports included)."""
    run_id = f"fid-c{c}-{client}-k{shards}-p{sends_per_pass}-bp{busy_poll_us}-{time.monotonic_ns()}"
    spec = DriveSpec(run_id, url, "vllm-omni", c, reqs, timeout_s=300, artifacts_dir=tmp / "art",
                     request_options={"client": client}, shards=shards, cpus=cpus, sends_per_pass=sends_per_pass,
                     trace_stalls=trace, busy_poll_us=busy_poll_us)
    t0 = time.perf_counter_ns()
    with open_store(tmp / "fidelity.duckdb", create=True) as store, (LiveFeed(tmp / "fidelity.duckdb") if live else nullcontext()) as feed:
        record_run(store, spec, engine="reference", kind="exploratory", telemetry=False, live=feed,
                   store_threads=store_threads)
        t1 = time.perf_counter_ns()
        rows = store.con.execute("SELECT t_arrival_ns, t_arrival_ns - server_emit_ns, request_index FROM chunks "
                                 "WHERE run_id = ? AND kind = 'audio' AND server_emit_ns IS NOT NULL", [run_id]).fetchall()
        reads = store.con.execute("SELECT DISTINCT request_index, t_arrival_ns FROM chunks WHERE run_id = ?",
                                  [run_id]).fetchall()
        spans = store.con.execute("SELECT t_send_ns, t_end_ns FROM requests WHERE run_id = ?", [run_id]).fetchall()
        overhead = json.loads(store.scalar("SELECT driver_overhead_json FROM runs WHERE run_id = ?", [run_id]) or "{}")
        failed = dict(run_metrics(store, run_id).failures_by_class)  # the console's own count, by class
        status = store.scalar("SELECT status FROM runs WHERE run_id = ?", [run_id])
    if status != "complete":  # figures from a failed drive would pass for the driver's
        raise SystemExit(f"driver run {run_id} ended {status}: "
                         f"{overhead.get('fatal') or overhead.get('error') or 'see driver_overhead_json'}")
    k = len(overhead.get("shards") or [None])
    shard_of = reader_of(c, len(reqs), k)
    by_shard: dict[int, list[int]] = {}
    for i, t in reads:
        by_shard.setdefault(shard_of(i), []).append(t)
    loop_lag = overhead.get("loop_lag") or {}
    return Side([d for _, d, _ in rows], [a for a, _, _ in rows], [tuple(s) for s in spans], overhead.get("cpu_s", float("nan")),
                t0, t1, loop_lag.get("max_ms"), overhead.get("gc"), k, overhead.get("start_spread_ms"), failed=failed,
                loop_lag_worst=loop_lag.get("worst") or [], loop_lag_teardown_max_ms=loop_lag.get("teardown_max_ms"),
                deferred_sends=overhead.get("deferred_sends"), runqueue=overhead.get("runqueue"),
                event_shards=[shard_of(i) for _, _, i in rows], shard_reads={sh: np.unique(ts) for sh, ts in by_shard.items()},
                traces=[s["trace"] for s in overhead["shards"]] if "trace" in (overhead.get("shards") or [{}])[0]
                else [overhead["trace"]] if "trace" in overhead else [])


def reader_of(c: int, n: int, k: int):
    """request index -> the driver process that ran it, for a drive of n requests on c slots over
    k processes with no warmup (the measured phase's positions are the request indexes)."""
    slots = min(c, n) or 1
    return lambda i: slot_shard(i, slots, k)


def shard_wait(side: Side, e: int) -> dict:
    """While audio event e waited (its emit to its arrival): the longest the process that read it
    went without reading anything (from the emit on), and how many reads the other processes made
    meanwhile. A long silence with the others reading means that process was not running, not that
    the bytes were late for everyone."""
    if not side.shard_reads:
        return {}
    t1 = side.arrivals[e]
    t0 = t1 - side.deltas[e]
    sh = side.event_shards[e]
    own = side.shard_reads[sh]
    lo, hi = np.searchsorted(own, t0, side="left"), np.searchsorted(own, t1, side="right")
    window = np.concatenate(([t0], own[lo:hi]))
    silent = float(np.diff(window).max()) / 1e6 if window.size > 1 else 0.0
    others = sum(int(np.searchsorted(ts, t1, side="right") - np.searchsorted(ts, t0, side="left"))
                 for o, ts in side.shard_reads.items() if o != sh)
    out = {"shard": sh, "shard_silent_ms": round(silent, 3), "other_shards_reads": others}
    if side.traces:  # what that process's loop thread did in the gap before the event's read
        overlapping = [g for g in side.traces[sh]["gaps"] if g[0] < t1 and g[1] > t0]
        if overlapping:
            gap = max(overlapping, key=lambda g: g[1] - g[0])
            out["gap"] = explain_gap(gap, side.traces[sh]["sender"], t0)
    return out


async def _plain(url: str, c: int, bodies: list[bytes]) -> dict:
    import aiohttp

    deltas: list[int] = []
    arrivals: list[int] = []
    spans: list[tuple[int, int]] = []
    failed: dict[str, int] = {}
    queue = list(bodies)
    cpu0 = time.process_time()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c),
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        async def worker():
            while queue:
                body = queue.pop()
                sent = time.perf_counter_ns()
                try:
                    async with session.post(url + "/v1/chat/completions", data=body,
                                            headers={"content-type": "application/json"}) as response:
                        if response.status != 200:
                            raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
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
                                arrivals.append(timestamp)
                except (aiohttp.ClientError, OSError, ValueError) as exc:  # counted, as the driver stores them
                    failed[type(exc).__name__] = failed.get(type(exc).__name__, 0) + 1
                spans.append((sent, time.perf_counter_ns()))
        await asyncio.gather(*(worker() for _ in range(c)))
    return {"deltas": deltas, "arrivals": arrivals, "spans": spans, "cpu_s": time.process_time() - cpu0,
            "failed": failed}


def _plain_child(url: str, c: int, bodies: list[bytes], out, cpus: tuple[int, ...] = ()) -> None:
    if cpus:
        os.sched_setaffinity(0, set(cpus))
    out.put(asyncio.run(_plain(url, c, bodies)))


def pin_process(pid: int, cpus: set[int]) -> None:
    """Pin every thread a process has now (and, by inheritance, those it starts later)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def plain_side(url: str, c: int, bodies: list[bytes], cpus: tuple[int, ...] = ()) -> Side:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    t0 = time.perf_counter_ns()
    p = ctx.Process(target=_plain_child, args=(url, c, bodies, q, cpus))
    p.start()
    res = q.get(timeout=600)
    t1 = time.perf_counter_ns()
    p.join(30)
    return Side(res["deltas"], res["arrivals"], res["spans"], res["cpu_s"], t0, t1, failed=res["failed"])


def engine_schedule(url: str, side: Side) -> dict:
    """The engine's own schedule slip over the side's run [t0, t1] (perf_counter_ns is
    CLOCK_MONOTONIC: one clock for the bench, the clients and the engine on this host), with the
    engine's own view (`at`) of the run's latest events' chunks, found by their emit stamps."""
    emits = ",".join(str(side.arrivals[i] - side.deltas[i]) for i in latest(side))
    with urllib.request.urlopen(f"{url}/stats?since_ns={side.t0}&until_ns={side.t1}&emits={emits}", timeout=30) as r:
        return json.loads(r.read())["schedule"]


def latest(side: Side, n: int = 5) -> list[int]:
    """The indexes of the side's n latest audio events, latest first."""
    return [int(i) for i in np.argsort(side.deltas)[::-1][:n]] if side.deltas else []


def live_streams(spans: list[tuple[int, int]], arrivals: list[int]) -> tuple[int, float]:
    """(max, median) over the audio events of how many requests were open (sent, not ended) when
    the event arrived."""
    if not arrivals:
        return 0, 0.0
    starts = np.sort([s for s, _ in spans])
    ends = np.sort([e for _, e in spans])
    t = np.asarray(arrivals)
    open_now = np.searchsorted(starts, t, side="right") - np.searchsorted(ends, t, side="left")
    return int(open_now.max()), float(np.median(open_now))


WINDOW_NS = 10_000_000  # what `around` counts before an instant


def around(sends: np.ndarray, ends: np.ndarray, t: int) -> dict:
    """Where instant `t` lies in a run (its requests' sorted send and end instants): ms since its
    first send, and the requests sent and ended in the 10 ms before it (a closed loop sends a wave
    of bodies as a wave of streams ends)."""
    window = (np.searchsorted(sends, t, side="right") - np.searchsorted(sends, t - WINDOW_NS),
              np.searchsorted(ends, t, side="right") - np.searchsorted(ends, t - WINDOW_NS))
    return {"at_ms": round((t - int(sends[0])) / 1e6, 3) if sends.size else None,
            "sent_10ms_before": int(window[0]), "ended_10ms_before": int(window[1])}


def worst_moments(side: Side, n: int = 5) -> dict:
    """The n latest events and the driver's n worst loop lags, each with `around` it."""
    sends, ends = np.sort([a for a, _ in side.spans]), np.sort([b for _, b in side.spans])
    at = side.engine.get("at") or {}
    events = [{"skew_ms": side.deltas[i] / 1e6, **around(sends, ends, side.arrivals[i]), **shard_wait(side, i),
               **({"engine": e} if (e := at.get(str(side.arrivals[i] - side.deltas[i]))) else {})}
              for i in latest(side, n)]
    lags = [{"lag_ms": ms, **around(sends, ends, int(t))} for t, ms in side.loop_lag_worst[:n]]
    return {"latest_events": events, "worst_loop_lags": lags}


def figures(side: Side, c: int) -> dict:
    """Everything the table and the JSON report for one client's run at concurrency c."""
    d = np.asarray(side.deltas, dtype=float) / 1e6
    live_max, live_med = live_streams(side.spans, side.arrivals)
    a = np.asarray(side.arrivals)
    span_s = (a.max() - a.min()) / 1e9 if a.size > 1 else float("nan")
    out = {"events": int(d.size), "requests": len(side.spans), "failed": sum(side.failed.values()),
           "failures": side.failed, "live_max": live_max, "live_median": live_med,
           "event_rate": d.size / span_s if span_s == span_s and span_s > 0 else float("nan"),
           "p50_ms": float(np.percentile(d, 50)) if d.size else float("nan"),
           "p99_ms": float(np.percentile(d, 99)) if d.size else float("nan"),
           "max_ms": float(d.max()) if d.size else float("nan"),
           "cpu_us_per_event": cpu_us_per_event(side.cpu_s, int(d.size)),
           "opening_ms": opening_ms(side.spans, c), "engine": side.engine}
    if side.loop_lag_max_ms is not None:
        out["loop_lag_max_ms"] = side.loop_lag_max_ms
        out["loop_lag_teardown_max_ms"] = side.loop_lag_teardown_max_ms
    if side.gc is not None:
        out["gc"] = side.gc
    out["shards"] = side.shards
    if side.deferred_sends is not None:
        out["deferred_sends"] = side.deferred_sends
    if side.steal is not None:
        out["steal_ms"], out["steal_max_cpu_ms"] = side.steal["ms"], side.steal["max_cpu_ms"]
    if side.runqueue is not None:
        out["runqueue_wait_ms"] = side.runqueue["wait_ms"]
        out["runqueue_wait_max_shard_ms"] = side.runqueue["max_shard_wait_ms"]
    out["worst"] = worst_moments(side)
    if side.start_spread_ms is not None:
        out["start_spread_ms"] = side.start_spread_ms
    return out


ALWAYS_POLL_US = 10**9  # `--busy-poll-us always`: a window longer than any drive


def variants(clients: list[str], shards: list[int | str], sends_per_pass: list[int] | None = None,
             busy_poll_us: list[int] | None = None) -> list[tuple[str, str, str, int | str, int, int]]:
    """(result key, label, client, shards, sends per pass, busy poll µs) per driver variant: every
    client at every shard count, send budget and busy-poll window; the first is "driver". Labels
    are the client's name, with /kK when several shard counts are compared, /pN when several send
    budgets are and /bpN (µs; /bp-always) when several busy-poll windows are."""
    budgets = sends_per_pass or [SENDS_PER_PASS]
    polls = busy_poll_us or [0]
    out: list[tuple[str, str, str, int | str, int, int]] = []
    for cl in clients:
        for k in shards:
            for p in budgets:
                for bp in polls:
                    label = (cl + (f"/k{k}" if len(shards) > 1 else "") + (f"/p{p}" if len(budgets) > 1 else "")
                             + (f"/bp{'-always' if bp >= ALWAYS_POLL_US else bp}" if len(polls) > 1 else ""))
                    out.append(("driver" if not out else f"driver:{label}", label, cl, k, p, bp))
    return out


def measure(concurrencies: list[int], clients: str | list[str] = DEFAULT_TRANSPORT, *, profile: str | None = None,
            profiles_file: Path | None = None, requests_per_c: dict[int, int] | None = None, waves: int = 2,
            plain: bool = True, repeats: int = 1, live: bool = False, shards: list[int | str] | None = None,
            log=lambda line: None, pin: bool = False, sends_per_pass: list[int] | None = None,
            store_threads: int | None = 1, trace: bool = False,
            busy_poll_us: list[int] | None = None, prime: bool = False) -> dict[int, dict[str, list[dict]]]:
    """Per C: {"driver": [figures per repeat], "driver:<label>": ..., "plain": ...} (see `variants`).
    The engine runs `profile` (built-in or from `profiles_file`), else `fidelity`. `pin`: the
    engine on CPU 0, driver process k on CPU 1 + k (cycling), the plain client on CPUs 1..n-1."""
    clients = [clients] if isinstance(clients, str) else list(clients)
    runs: dict[int, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        if profile is None:
            (tmp / "profiles.toml").write_text(PROFILE)
            profile, profiles_file = "fidelity", tmp / "profiles.toml"
        prompt = prompt_wav(tmp / "prompt.wav")
        d = get_dialect("vllm-omni")
        eng = start_engine(tmp, profile=profile, profiles_file=profiles_file)
        clients_cpus: tuple[int, ...] = ()
        if pin:
            n = os.cpu_count() or 1
            if n < 2:
                raise SystemExit("--pin needs at least 2 CPUs (the engine gets CPU 0)")
            assert eng.proc is not None
            pin_process(eng.proc.pid, {0})
            clients_cpus = tuple(range(1, n))
        vs = variants(clients, shards or [1], sends_per_pass, busy_poll_us)
        # requests per C: max(32, waves x C), since p99 is not the max
        reqs_at = {c: [RequestSpec(f"s{i % 2}-{i}", TEXTS[i % 2], prompt)
                       for i in range((requests_per_c or {}).get(c, max(32, waves * c)))] for c in concurrencies}

        def drive(c: int, variant: tuple) -> Side:
            _, _, cl, k, p, bp = variant
            return driver_side(eng.spec.url, c, reqs_at[c], tmp, cl, live, k, clients_cpus, p, store_threads, trace, bp)

        try:
            if prime:  # one drive per C whose figures are dropped: a fresh machine's first-run costs land in it
                for c in concurrencies:
                    drive(c, vs[0])
                    log(f"primed C={c} (one drive, not counted)")
            for rep in range(repeats):
                for c in concurrencies:
                    reqs = reqs_at[c]
                    got = runs.setdefault(c, {})
                    sides: list[tuple[str, Side]] = []
                    for variant in vs:
                        steal = HostSteal()
                        side = drive(c, variant)
                        side.steal = steal.summary()
                        side.engine = engine_schedule(eng.spec.url, side)
                        sides.append((variant[0], side))
                    if plain:
                        bodies = [json.dumps(d.build_body(r.text, str(prompt), None)).encode() for r in reqs]
                        steal = HostSteal()
                        side = plain_side(eng.spec.url, c, bodies, clients_cpus)
                        side.steal = steal.summary()
                        side.engine = engine_schedule(eng.spec.url, side)
                        sides.append(("plain", side))
                    for who, side in sides:
                        f = figures(side, c)
                        got.setdefault(who, []).append(f)
                        log(f"repeat {rep + 1} C={c} {who}: p99 {f['p99_ms']:.3f} ms, max {f['max_ms']:.3f} ms, "
                            f"loop lag {f.get('loop_lag_max_ms')} ms (teardown {f.get('loop_lag_teardown_max_ms')}), "
                            f"opening {f['opening_ms']:.1f} ms, live {f['live_max']}, failed {f['failed']}, "
                            f"off-CPU wait {f.get('runqueue_wait_ms')} ms (most in one process "
                            f"{f.get('runqueue_wait_max_shard_ms')}), host steal {f.get('steal_ms')} ms (most on one CPU "
                            f"{f.get('steal_max_cpu_ms')}), "
                            f"engine slip p99 {f['engine'].get('slip_p99_ms')} ms")
                        for kind, moments in f["worst"].items():
                            if moments:
                                log(f"  {kind}: " + "; ".join(
                                    f"{m.get('skew_ms', m.get('lag_ms')):.2f} ms at {m['at_ms']:.0f} ms "
                                    f"(sent {m['sent_10ms_before']}, ended {m['ended_10ms_before']} in the 10 ms before"
                                    + (f"; shard {m['shard']} read nothing for {m['shard_silent_ms']:.2f} ms of it, "
                                       f"the others read {m['other_shards_reads']} times" if "shard" in m else "")
                                    + (f"; its loop thread, in the {m['gap']['gap_ms']:.2f} ms it read nothing: on a CPU "
                                       f"{m['gap']['on_cpu_ms']:.2f} ms, waiting for one {m['gap']['runqueue_ms']:.2f}; "
                                       f"of the {m['gap']['after_emit_ms']:.2f} ms after the emit not running (asleep "
                                       f"or its vCPU stolen) at least {m['gap']['not_running_after_emit_ms']:.2f}, "
                                       f"the sender holding the GIL "
                                       f"{m['gap']['sender_gil_ms']:.2f}" if "gap" in m else "")
                                    + (f"; the engine: write gap {m['engine']['write_gap_ms']:.2f} ms, bytes left in "
                                       f"its buffer {m['engine']['queued']}" if "engine" in m else "") + ")"
                                    for m in moments[:3]))
        finally:
            eng.stop()
    return runs


def _med(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(np.median(vals)) if vals else float("nan")


def _top(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(max(vals)) if vals else float("nan")


def _slip(rows: list[dict], key: str, agg=_med) -> float:
    return agg([r["engine"] for r in rows if r["engine"].get(key) is not None], key)


def summarise(runs: dict[int, dict[str, list[dict]]]) -> dict:
    """Per C: the medians over repeats (max skew, loop lag and engine slip max: the highest), the
    worst paired p99 ratio; overall: the worst pair, the client's ceiling and the incomplete runs."""
    table, worst, ceiling = {}, None, None
    for c, got in runs.items():
        row = {}
        for who, rows in got.items():
            row[who] = {"live_max": _top(rows, "live_max"), "live_median": _med(rows, "live_median"),
                        "event_rate": _med(rows, "event_rate"), "p50_ms": _med(rows, "p50_ms"),
                        "p99_ms": _med(rows, "p99_ms"), "max_ms": _top(rows, "max_ms"),
                        "cpu_us_per_event": _med(rows, "cpu_us_per_event"), "events": _med(rows, "events"),
                        "failed": _top(rows, "failed"),
                        "loop_lag_max_ms": _top(rows, "loop_lag_max_ms"),
                        "opening_ms": _top(rows, "opening_ms"),
                        "runqueue_wait_max_shard_ms": _top(rows, "runqueue_wait_max_shard_ms"),
                        "steal_ms": _top(rows, "steal_ms"), "steal_max_cpu_ms": _top(rows, "steal_max_cpu_ms"),
                        "engine_slip_p50_ms": _slip(rows, "slip_p50_ms"), "engine_slip_p99_ms": _slip(rows, "slip_p99_ms"),
                        "engine_slip_max_ms": _slip(rows, "slip_max_ms", _top),
                        "engine_timeline_breaks": _slip(rows, "timeline_breaks", _top),
                        "engine_write_gap_p99_ms": _slip(rows, "write_gap_p99_ms"),
                        "engine_write_gap_max_ms": _slip(rows, "write_gap_max_ms", _top),
                        "engine_queued_chunks": _slip(rows, "queued_chunks", _top)}
        if "plain" in got:
            pairs = [(dr["p99_ms"] / pl["p99_ms"], k) for k, (dr, pl) in enumerate(zip(got["driver"], got["plain"]))]
            ratio, rep = max(pairs)
            row["worst_p99_ratio"] = ratio
            if worst is None or ratio > worst["ratio"]:
                worst = {"ratio": ratio, "concurrency": c, "repeat": rep + 1}
        table[c] = row
    for c, row in sorted(table.items(), key=lambda kv: kv[1]["driver"]["event_rate"]):
        if row["driver"]["p99_ms"] > CEILING_MS:
            ceiling = {"concurrency": c, "event_rate": row["driver"]["event_rate"], "p99_ms": row["driver"]["p99_ms"]}
            break
    return {"per_concurrency": table, "worst_pair": worst, "ceiling": ceiling, "incomplete": incomplete_runs(runs)}


def print_table(summary: dict, clients: list[str], shards: list[int | str] | None = None,
                sends_per_pass: list[int] | None = None, busy_poll_us: list[int] | None = None) -> None:
    print("arrival - emit skew (ms) over audio events; median of the repeats (max, loop lag and slip max: "
          "the highest); engine slip = the engine's own write time - its step's due time, same run; "
          "write gap = the engine's emit stamp to its write's return (an upper bound on the engine's share); "
          "off-CPU = the most one driver process's loop waited for a CPU over the run (schedstat); "
          "queued = chunks the kernel did not take whole at the engine's write (their write gap is no bound); "
          "steal = the hypervisor's steal over the run, all CPUs (/proc/stat; the highest repeat)")
    vs = variants(clients, shards or [1], sends_per_pass, busy_poll_us)
    cols = [key for key, *_ in vs] + ["plain"]
    labels = {key: label for key, label, *_ in vs}
    head = (f"{'C':>5} {'client':>16} {'live max':>8} {'live med':>8} {'events/s':>9} {'p50':>7} {'p99':>7} "
            f"{'max':>7} {'CPU us/ev':>9} {'loop lag':>8} {'slip p50':>8} {'slip p99':>8} {'slip max':>8} {'breaks':>6} "
            f"{'gap p99':>8} {'gap max':>8} {'queued':>6} {'opening':>7} {'off-CPU':>7} {'steal':>7} {'failed':>6}")
    print(head)
    for c, row in summary["per_concurrency"].items():
        for who in cols:
            if who not in row:
                continue
            r = row[who]
            name = labels.get(who, who)
            print(f"{c:>5} {name:>16} {r['live_max']:>8.0f} {r['live_median']:>8.1f} {r['event_rate']:>9.0f} "
                  f"{r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} {r['max_ms']:>7.3f} {r['cpu_us_per_event']:>9.1f} "
                  f"{r['loop_lag_max_ms']:>8.3f} {r['engine_slip_p50_ms']:>8.3f} {r['engine_slip_p99_ms']:>8.3f} "
                  f"{r['engine_slip_max_ms']:>8.3f} {r['engine_timeline_breaks']:>6.0f} "
                  f"{r['engine_write_gap_p99_ms']:>8.3f} {r['engine_write_gap_max_ms']:>8.3f} "
                  f"{r['engine_queued_chunks']:>6.0f} {r['opening_ms']:>7.1f} "
                  f"{r['runqueue_wait_max_shard_ms']:>7.1f} {r['steal_ms']:>7.1f} {r['failed']:>6.0f}")
        if "worst_p99_ratio" in row:
            print(f"{c:>5} {'p99 ratio':>16} driver/plain {row['driver']['p99_ms'] / row['plain']['p99_ms']:.2f} "
                  f"(medians), worst pair {row['worst_p99_ratio']:.2f}")
    ceil = summary["ceiling"]
    rates = [r["driver"]["event_rate"] for r in summary["per_concurrency"].values()]
    if ceil:
        print(f"client ceiling: driver p99 first exceeds {CEILING_MS:g} ms at {ceil['event_rate']:.0f} audio events/s "
              f"(C={ceil['concurrency']}, p99 {ceil['p99_ms']:.3f} ms)")
    else:
        print(f"client ceiling: not reached (driver p99 <= {CEILING_MS:g} ms up to {max(rates):.0f} audio events/s)")
    w = summary["worst_pair"]
    if w:
        print(f"worst paired p99 ratio (driver / plain, one repeat): {w['ratio']:.2f} at C={w['concurrency']} repeat {w['repeat']}")
    for line in summary["incomplete"]:
        print(line)


def incomplete_runs(runs: dict[int, dict[str, list[dict]]]) -> list[str]:
    """One line per run in which some request did not complete: its skews cover only the requests
    that did, under less load than the run was meant to put on, so its figures do not count."""
    return [f"INCOMPLETE: C={c} {who} repeat {k + 1}: {f['failed']} of {f['requests']} requests failed "
            f"({', '.join(f'{n} {cls}' for cls, n in f['failures'].items())}); its figures do not count"
            for c, got in runs.items() for who, rows in got.items() for k, f in enumerate(rows) if f["failed"]]


def _concurrencies(values: list[str]) -> list[int]:
    out = []
    for v in values:
        out += [int(x) for x in v.split(",") if x.strip()]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=None, help="reference-engine profile (built-in, e.g. wide, or from --profiles-file)")
    ap.add_argument("--profiles-file", type=Path, default=None)
    ap.add_argument("--concurrencies", nargs="+", default=None, help="e.g. 64 256 1024 (or 64,256,1024)")
    ap.add_argument("--clients", default=DEFAULT_TRANSPORT,
                    help=f"comma-separated driver transports from {', '.join(TRANSPORTS)}; the first is compared with plain")
    ap.add_argument("--shards", default="1",
                    help="comma-separated driver process counts per drive (integers or auto), e.g. 1,4,8; "
                         "each driver client runs once per value")
    ap.add_argument("--sends-per-pass", default=str(SENDS_PER_PASS),
                    help="comma-separated budgets of request sends per loop pass of a driver process "
                         f"(default {SENDS_PER_PASS}; a large value is unpaced); each driver client runs once per value")
    ap.add_argument("--store-threads", default="1",
                    help="DuckDB threads of the bench's store while a driver run records (record_run's "
                         "store_threads; default 1, as `campaign run`); 'all' leaves DuckDB's own count")
    ap.add_argument("--busy-poll-us", default="0",
                    help="comma-separated windows (µs, or 'always') a driver process's loop keeps polling after a "
                         "read instead of sleeping (DriveSpec.busy_poll_us; default 0: it sleeps); each driver "
                         "client runs once per value")
    ap.add_argument("--prime", action="store_true",
                    help="before the first repeat, one drive per concurrency whose figures are dropped (a freshly "
                         "started machine's first drive at 1,024 streams lagged 18-29 ms at its opening)")
    ap.add_argument("--trace", action="store_true",
                    help="each driver process records what its loop thread did in every silence of 0.5 ms or more "
                         "(DriveSpec.trace_stalls; costs a schedstat read per body read): the latest events say it")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--waves", type=int, default=2, help="requests per C = max(32, waves x C)")
    ap.add_argument("--live", action="store_true", help="drive with a LiveFeed attached, as `campaign run` does")
    ap.add_argument("--pin", action="store_true",
                    help="the engine on CPU 0, driver process k on CPU 1 + k, the plain client on CPUs 1..n-1")
    ap.add_argument("--json", type=Path, default=None, help="write every figure (per repeat and summarised) here")
    args = ap.parse_args(argv)
    cs = _concurrencies(args.concurrencies) if args.concurrencies else DEFAULT_CS.get(args.profile, DEFAULT_CS[None])
    clients = [x.strip() for x in args.clients.split(",") if x.strip()]
    bad = [x for x in clients if x not in TRANSPORTS]
    if bad or not clients:
        ap.error(f"--clients: unknown transport {bad[0] if bad else '(none)'!r}; choose from {', '.join(TRANSPORTS)}")
    shards: list[int | str] = []
    for x in (v.strip() for v in args.shards.split(",")):
        if x:
            try:
                shards.append(x if x == "auto" else int(x))
                check_shards(shards[-1])
            except ValueError:
                ap.error(f"--shards: {x!r} is not an integer >= 1 or 'auto'")
    if not shards:
        ap.error("--shards: give at least one value")
    try:
        budgets = [int(x) for x in args.sends_per_pass.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--sends-per-pass: {args.sends_per_pass!r} is not a list of integers >= 1")
    if not budgets or any(b < 1 for b in budgets):
        ap.error(f"--sends-per-pass: {args.sends_per_pass!r} is not a list of integers >= 1")
    try:
        polls = [ALWAYS_POLL_US if x.strip() == "always" else int(x) for x in args.busy_poll_us.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--busy-poll-us: {args.busy_poll_us!r} is not a list of integers >= 0 or 'always'")
    if not polls or any(bp < 0 for bp in polls):
        ap.error(f"--busy-poll-us: {args.busy_poll_us!r} is not a list of integers >= 0 or 'always'")
    store_threads: int | None = None
    if args.store_threads != "all":
        if not args.store_threads.isdigit() or int(args.store_threads) < 1:
            ap.error(f"--store-threads: {args.store_threads!r} is not an integer >= 1 or 'all'")
        store_threads = int(args.store_threads)
    if args.repeats < 1 or any(c < 1 for c in cs):
        ap.error("--repeats and every concurrency must be >= 1")
    started = time.time()
    runs = measure(cs, clients, profile=args.profile, profiles_file=args.profiles_file, repeats=args.repeats,
                   waves=args.waves, live=args.live, shards=shards, pin=args.pin, sends_per_pass=budgets,
                   store_threads=store_threads, trace=args.trace, busy_poll_us=polls, prime=args.prime,
                   log=lambda line: print(line, file=sys.stderr, flush=True))
    summary = summarise(runs)
    print(f"profile {args.profile or 'fidelity'}; {args.repeats} repeat(s); clients {', '.join(clients)} vs plain aiohttp"
          f"{'; live feed attached' if args.live else ''}{'; pinned to CPUs' if args.pin else ''}; "
          f"driver shards {', '.join(map(str, shards))}; sends per pass {', '.join(map(str, budgets))}; "
          f"busy poll (µs) {', '.join('always' if bp >= ALWAYS_POLL_US else str(bp) for bp in polls)}; "
          f"store threads while recording {args.store_threads}; "
          f"{os.cpu_count()} CPUs")
    print_table(summary, clients, shards, budgets, polls)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "command": "python bench/bench_timing_fidelity.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                        "processor": platform.processor()},
            "wall_s": round(time.time() - started, 1), "profile": args.profile or "fidelity", "clients": clients,
            "shards": shards, "sends_per_pass": budgets, "store_threads": args.store_threads, "pinned": args.pin,
            "trace": args.trace, "busy_poll_us": polls, "primed": args.prime,
            "summary": {str(c): v for c, v in summary["per_concurrency"].items()},
            "worst_pair": summary["worst_pair"], "ceiling": summary["ceiling"],
            "runs": {str(c): got for c, got in runs.items()},
            "incomplete": summary["incomplete"],
        }, indent=1, default=float))
    return 1 if summary["incomplete"] else 0


if __name__ == "__main__":
    sys.exit(main())
