"""`campaign probe --url URL --dialect D`: one ad-hoc, exploratory run against a running engine
(the console's answer to `vllm bench serve`), stored in the database and summarised."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.output import print_rows
from data.errors import CampaignError
from engine_adapters.dialects import DIALECTS, get_dialect
from engine_adapters.dialects.base import AUDIO_FORMATS
from engine_adapters.dialects.presets import PRESETS, PROTOCOL
from engine_adapters.transport_names import DEFAULT_TRANSPORT, TRANSPORT_NAMES

if TYPE_CHECKING:
    from engine_adapters.driver import RequestSpec
    from stats.metrics import RunMetrics


def register(sub) -> None:
    p = sub.add_parser("probe", help="one exploratory run against a running engine; prints its metrics")
    p.add_argument("--url", required=True, help="engine base URL, e.g. http://127.0.0.1:8091")
    p.add_argument("--dialect", required=True, choices=DIALECTS)
    p.add_argument("-c", "--concurrency", type=int, default=8, help="closed-loop concurrency (default 8)")
    p.add_argument("-n", "--requests", type=int, default=32, help="measured requests (default 32)")
    p.add_argument("--warmup", type=int, default=0, help="warmup requests before the measured ones")
    p.add_argument("--workload", help="Seed-TTS-format directory (default: bundled sample)")
    p.add_argument("--locale", help="workload locale (default: the only one, or 'en')")
    p.add_argument("--pools-file", help="pools JSON to read the pool from (as a plan's workload.pools_file; "
                                        "default: the workload's own pools.json)")
    p.add_argument("--pool", help="workload pool to draw from (default: its 'tuning' pool, else every utterance, "
                                  "leaving out every id a frozen plan reserved and has not opened)")
    p.add_argument("--db", help="run store (default: $CAMPAIGN_DB or ./campaign.duckdb)")
    p.add_argument("--artifacts", default="artifacts", help="folder for saved audio (default ./artifacts)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (default); json: the metrics document on stdout; csv: the metrics table on stdout "
                        "(metric, label, value in display units, unit); every other line then on stderr")
    p.add_argument("-o", "--output", dest="json_out", metavar="FILE", help="also write the metrics document (JSON) "
                                                                          "to this file")
    p.add_argument("--json", dest="json_out", help=argparse.SUPPRESS)  # deprecated spelling of --output FILE
    p.add_argument("--engine", default="probe", help="engine name to store the run under (default 'probe')")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout in seconds")
    p.add_argument("--client", choices=TRANSPORT_NAMES, default=DEFAULT_TRANSPORT,
                   help=f"HTTP client (default {DEFAULT_TRANSPORT}: stamps each socket read in the protocol callback; measured in bench/bench_timing_fidelity.py)")
    p.add_argument("--audio-format", choices=AUDIO_FORMATS, help="ask for WAV-per-delta or raw s16le deltas")
    p.add_argument("--preset", choices=tuple(PRESETS), default=PROTOCOL,
                   help="request body: protocol (default) or an engine's own benchmark body (docs/engines.md)")
    p.add_argument("--voice-prompt", help="voice placement (vllm-omni: ref_audio|audio_url|none; "
                                          "sglang-omni: ref_audio|audios|none; default: the dialect's first)")
    p.add_argument("--no-stream", action="store_true", help="send \"stream\": false (one JSON response)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-tokens", type=int, help="max_tokens (caps the thinker's text tokens)")
    p.add_argument("--no-telemetry", action="store_true", help="skip GPU identity and sampling")
    p.set_defaults(func=cmd_probe)


def _check(args) -> None:
    if args.concurrency < 1:
        raise CampaignError(f"-c/--concurrency must be >= 1, got {args.concurrency}")
    if args.requests < 1:
        raise CampaignError(f"-n/--requests must be >= 1, got {args.requests}")
    if args.warmup < 0:
        raise CampaignError(f"--warmup must be >= 0, got {args.warmup}")
    if args.timeout <= 0:
        raise CampaignError(f"--timeout must be > 0, got {args.timeout}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise CampaignError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    if not args.url.startswith(("http://", "https://")):
        raise CampaignError(f"--url {args.url!r}: expected http://HOST:PORT")


DEFAULT_POOL = "tuning"  # what a probe draws from when the workload has one (docs/statistics.md, "Who may send a reserved id")


def build_requests(workload: str | None, locale: str | None, pool: str | None, n: int,
                   reserved: frozenset[str] = frozenset(), pools_file: str | None = None) -> list[RequestSpec]:
    """The first n utterances of the pool, cycling when n exceeds it. With no pool: the workload's
    tuning pool (else every utterance) without the `reserved` ids; a named pool is taken as named
    (the run refuses it if it holds a reserved id, console/recording.py)."""
    from data.workload import load_workload
    from engine_adapters.driver import RequestSpec

    wl = load_workload(workload, locale, Path(pools_file) if pools_file else None)
    if pool is None:
        utts = [u for u in wl.pool(DEFAULT_POOL if DEFAULT_POOL in wl.pools else None) if u.utt_id not in reserved]
    else:
        utts = wl.pool(pool)
    if not utts:
        raise CampaignError(f"{wl.meta_path}: no utterances to send" + (
            f" (every one of pool {pool or DEFAULT_POOL!r} is a reserved holdout id)" if reserved and pool is None else ""))
    missing = [u for u in utts if not u.prompt_wav.is_file()]
    if missing:
        raise CampaignError(f"{wl.meta_path}: prompt wav missing for {missing[0].utt_id}: {missing[0].prompt_wav}")
    return [RequestSpec(u.utt_id, u.target_text, u.prompt_wav, u.prompt_text) for u in (utts[i % len(utts)] for i in range(n))]


def metric_rows(m: RunMetrics, raw: bool = False) -> list[list[Any]]:
    """The probe's metrics (the registry's `probe` surface), then the failures by class:
    [label, value as shown, unit]; `raw`: [name, label, value in display units, unit]."""
    from stats.metrics.registry import PROBE, metrics_on, throughput_unit

    rows: list[list[Any]] = []
    for d in metrics_on(PROBE):
        unit = throughput_unit(m.throughput_scale) if d.name == "throughput" else d.unit
        v = m.get(d.name)
        rows.append([d.name, d.label, None if v is None else v * d.scale, unit] if raw else [d.label, d.format(v), unit])
    for cls, count in m.failures_by_class.items():
        rows.append([f"failed_{cls}", f"failed: {cls}", count, ""] if raw else [f"failed: {cls}", str(count), ""])
    return rows


def cmd_probe(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from console.recording import new_run_id, record_run
    from data.store import open_store
    from engine_adapters.driver import DriveSpec
    from stats.metrics import run_metrics

    from data.manifest import protected_reservations
    from data.store import resolve_db_path

    _check(args)
    db = resolve_db_path(args.db)
    reserved: frozenset[str] = frozenset()
    if db.exists():  # a new store holds no reservation
        with open_store(args.db) as store:
            reserved = frozenset(i for r in protected_reservations(store) for i in r.ids)
    reqs = build_requests(args.workload, args.locale, args.pool, args.requests, reserved, args.pools_file)
    options = {"client": args.client, "preset": args.preset}
    if args.audio_format:
        options["audio_format"] = args.audio_format
    if args.voice_prompt:
        options["voice_prompt"] = args.voice_prompt
    if args.no_stream:
        options["stream"] = False
    request = get_dialect(args.dialect).request_config(options)  # bad option: one line, nothing stored
    run_id = new_run_id(args.engine, args.concurrency)
    spec = DriveSpec(run_id=run_id, url=args.url, dialect=args.dialect, concurrency=args.concurrency,
                     requests=reqs, warmup_requests=args.warmup, timeout_s=args.timeout,
                     artifacts_dir=Path(args.artifacts).resolve(),
                     sampling={"seed": args.seed, "temperature": args.temperature, "max_tokens": args.max_tokens},
                     request_options=options)
    as_json = args.format == "json"
    console = Console(stderr=args.format != "table")  # --format json|csv: stdout carries the document alone
    with open_store(args.db, create=True) as store:  # an exploratory record may start a store
        console.print(f"probe {args.url} ({args.dialect}, preset {request.preset}, voice {request.voice_placement}"
                      f"{'' if request.stream else ', not streamed'}) c={args.concurrency} n={args.requests} -> run {run_id}",
                      highlight=False)
        # requests done / planned while it runs (a terminal only; transient, so the table follows)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True, refresh_per_second=4) as progress:
            task = progress.add_task("requests", total=len(reqs) + args.warmup)
            record_run(store, spec, engine=args.engine, kind="exploratory", pool=args.pool,
                       note="exploratory probe: ad-hoc, never used for claims", telemetry=not args.no_telemetry,
                       on_progress=lambda done, total: progress.update(task, completed=done, total=total))
        m = run_metrics(store, run_id)
        run = store.query("SELECT status, loop_impl, client_impl, driver_overhead_json FROM runs WHERE run_id = ?", [run_id])[0]
        key = record_probe(store, args, spec.sampling, options, run_id, run["status"])
    console.print(f"candidate {args.engine} ({key[:12]}): `campaign candidates` lists it", highlight=False)
    if args.format == "csv":
        print_rows(["metric", "label", "value", "unit"], metric_rows(m, raw=True), "csv")
    else:
        print_rows(["metric", "value", "unit"], metric_rows(m), title=f"run {run_id} (exploratory)", console=console,
                   right=("value",))
    overhead = json.loads(run["driver_overhead_json"] or "{}")
    lag = overhead.get("send_lag", {})
    loop_lag = overhead.get("loop_lag", {})
    waited = overhead.get("runqueue")  # the host kept the driver off a CPU this long (docs/timing.md)
    stolen = overhead.get("host_steal")  # the hypervisor took the VM's CPUs this long (docs/timing.md)
    steal_text = f"{stolen['ms']:.0f} ms" if stolen else "-"  # /proc/stat counts 10 ms ticks
    console.print(f"status {run['status']} · {run['loop_impl']} · {run['client_impl']} · "
                  f"send lag p99 {_ms(lag.get('p99_ms'))} · loop lag p99 {_ms(loop_lag.get('p99_ms'))} · "
                  f"driver off-CPU {_ms(waited['wait_ms'] if waited else None)} · "
                  f"host steal {steal_text}", highlight=False)
    doc = {"run_id": run_id, "url": args.url, "dialect": args.dialect, "status": run["status"],
           "metrics": m.to_dict(), "driver": {"loop": run["loop_impl"], "client": run["client_impl"], **overhead}}
    text = json.dumps(doc, indent=2, default=str) + "\n"
    if args.json_out:
        Path(args.json_out).write_text(text)
    if as_json:
        sys.stdout.write(text)
    return 0 if m.failed == 0 and run["status"] == "complete" else 1


def record_probe(store, args, sampling: dict, options: dict, run_id: str, status: str) -> str:
    """A probe is an attempt of its own configuration (docs/results.md, "Candidates"): the
    candidate is registered and measured, the attempt names the run."""
    from console.candidates import probe_candidate
    from console.runner import store_attempt
    from data import candidates
    from data.audit import atomic

    outcome = "measured" if status == "complete" else "interrupted"
    with atomic(store):
        key = probe_candidate(store, args.engine, args.url, args.dialect, sampling, options)
        store_attempt(store, None, args.engine, {"url": args.url, "dialect": args.dialect, "options": options,
                                                 "sampling": sampling}, outcome,
                      reason=None if outcome == "measured" else f"run {run_id} ended {status}", run_ids=[run_id],
                      config_sha256=key)
        candidates.record_outcome(store, key, outcome, plan_hash=None)
    return key


def _ms(v) -> str:
    return "-" if v is None else f"{v:.3f} ms"
