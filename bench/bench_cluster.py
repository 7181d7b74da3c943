"""Wall time of one plan run sequentially (`campaign run`) and through Ray (`--cluster local`) on
this host, with several reference engines (docs/cluster.md).

Ray gets `--gpus` fake GPU resources (`ray.init(num_gpus=N)`, no NVML needed), so up to N pair
groups run at once; the reference engines pace their decode steps with timers, so they overlap
well even on a 2-core box. Pair-affine placement puts all engines of one (concurrency, repeat)
slot in one group, so the plan needs several slots (concurrencies x repeats) to spread. Prints both wall times, the ratio sequential / Ray, and the number of
requests stored by each (they must be equal).

    .venv/bin/python bench/bench_cluster.py [--engines 4] [--gpus 2] [--requests 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console.runner import RunnerOptions, run_plan  # noqa: E402
from data.plan_freeze import freeze  # noqa: E402
from data.plan_loading import plan_from_store  # noqa: E402
from data.store import Store  # noqa: E402

PROFILES = ("baseline", "fast")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_doc(engines: int, requests: int, repeats: int, concurrencies: list[int]) -> dict:
    ports = [free_port() for _ in range(engines)]
    entries = []
    for i, port in enumerate(ports):
        profile = PROFILES[i % len(PROFILES)]
        entries.append({"name": f"ref-{i}-{profile}", "adapter": "reference", "revision": "bundled", "profile": profile,
                        "dialect": "vllm-omni", "port": port, "health_timeout_s": 60,
                        "argv": [sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni",
                                 "--profile", profile, "--host", "127.0.0.1", "--port", str(port)]})
    return {
        "schema": "omni-campaign-plan/1", "name": "bench-cluster", "description": "bench/bench_cluster.py",
        "model": {"id": "openbmb/MiniCPM-o-4_5", "revision": "bench", "checkpoint_paths": []},
        "engines": entries,
        "workload": {"root": str(ROOT / "data" / "sample_workload"), "locale": "en", "pool": "tuning"},
        "sweep": {"concurrencies": concurrencies, "requests_per_run": requests, "warmup_repeats": 0,
                  "measured_repeats": repeats, "restart": "per_repeat", "interleave": "alternate", "timeout_s": 60,
                  "kind": "measured"},
    }


def run_once(tmp: Path, name: str, doc: dict, cluster: str | None) -> tuple[float, int, int]:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(doc))
    with Store(tmp / f"{name}.duckdb") as store:
        plan = plan_from_store(store, freeze(store, path).hash)
        t0 = time.perf_counter()
        res = run_plan(store, plan, RunnerOptions(artifacts_dir=tmp / f"{name}-artifacts", cluster=cluster,
                                                  telemetry=False, log=lambda _m: None))
        wall = time.perf_counter() - t0
        stored = store.scalar("SELECT count(*) FROM requests")
    if not res.ok:
        raise SystemExit(f"{name}: cells did not succeed: {res.problems[:3]}")
    return wall, len(res.run_ids), stored


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=2, help="fake GPU resources Ray offers")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[4])
    args = ap.parse_args()
    import ray

    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        doc = plan_doc(args.engines, args.requests, args.repeats, args.concurrency)
        seq, runs_s, req_s = run_once(tmp, "sequential", doc, None)
        ray.init(num_cpus=os.cpu_count() or 2, num_gpus=args.gpus, include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 * 2**20, logging_level="ERROR",
                 resources={"accelerator_type:bench-fake": args.gpus})
        try:
            doc["name"] = "bench-cluster-ray"  # another plan hash: its own store anyway
            par, runs_r, req_r = run_once(tmp, "ray", doc, "local")
        finally:
            ray.shutdown()
    print(f"plan: {args.engines} reference engines x C{args.concurrency} x {args.repeats} repeat(s), "
          f"{args.requests} requests per run, {os.cpu_count()} cores, {args.gpus} fake GPU(s)")
    print(f"sequential: {seq:7.1f} s  {runs_s} runs  {req_s} requests stored")
    print(f"ray:        {par:7.1f} s  {runs_r} runs  {req_r} requests stored")
    print(f"wall-time ratio sequential / ray: {seq / par:.2f}x")
    if (runs_s, req_s) != (runs_r, req_r):
        raise SystemExit("the two runs stored different numbers of runs or requests")


if __name__ == "__main__":
    main()
