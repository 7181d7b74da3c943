"""`campaign plan init|freeze|verify|addendum|show|open-holdout|list`: frozen campaign plans."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from console.commands.db import add_db_arg
from console.output import print_rows
from data.errors import CampaignError
from data.manifest import holdout_opened, open_holdout
from data.plans import (
    ADDENDUM_SCHEMA_ID, PLAN_SCHEMA_ID, freeze, frozen_plan_for_file, plan_from_store, read_json,
    resolve_hash, stored_document, validate_plan_dict, verify_plan_file,
)
from data.store import open_store


def _engine(name: str, profile: str, port: int, dialect: str = "vllm-omni") -> dict:
    return {
        "name": name, "adapter": "reference", "revision": "bundled", "profile": profile, "dialect": dialect,
        "argv": [], "env": {}, "host": "127.0.0.1", "port": port, "health_timeout_s": 60,
        "config_path": None, "checkpoint_paths": [],
        "request": {"audio_format": "wav", "voice_prompt": "audio_url"},
    }


def _quality_scorers(demo: bool) -> dict:
    """The demo scores with the bundled scorers; a real campaign with the Seed-TTS protocol's
    (whisper / seedtts-sim / utmos22, docs/quality.md says which files each folder holds)."""
    if demo:
        return {"scorers": {"wer": "pocketsphinx", "sim": "resemblyzer", "mos": "dnsmos"}, "model_paths": {}}
    return {"scorers": {"wer": "whisper", "sim": "seedtts-sim", "mos": "utmos22"},
            "model_paths": {"whisper": "<folder: openai/whisper-large-v3 snapshot>",
                            "seedtts-sim": "<folder: wavlm_large.pt + wavlm_large_finetune.pth>",
                            "utmos22": "<folder: utmos22_strong_step7459_v1.pt>"},
            "dtypes": {}}


def template(demo: bool) -> dict:
    """The plan written by `plan init`; `_comment` keys document each section (JSON has no comments)."""
    engines = [_engine("ref-baseline", "baseline", 8091), _engine("ref-fast", "fast", 8092)]
    if not demo:
        engines = [
            {**_engine("vllm-omni-main", "default", 8091), "adapter": "vllm_omni", "revision": "<git sha>",
             "argv": ["vllm", "serve", "<model dir>", "--omni", "--trust-remote-code", "--port", "8091"],
             "health_timeout_s": 900, "checkpoint_paths": ["<model dir>/model.safetensors"]},
            {**_engine("sglang-omni-main", "default", 8092, "sglang-omni"), "adapter": "sglang_omni",
             "revision": "<git sha>", "health_timeout_s": 900,
             "argv": ["sgl-omni", "serve", "--model-path", "<model dir>", "--model-name", "minicpmo", "--port", "8092"],
             "request": {"audio_format": "wav", "voice_prompt": "ref_audio"}},
        ]
    base, cand = engines[0]["name"], engines[1]["name"]
    return {
        "_comment": "Campaign plan (schema data/plan_schema.json). Keys starting with '_' are comments. "
                    "Freeze with `campaign plan freeze FILE` before measuring; change a frozen plan only "
                    "through `campaign plan addendum HASH FILE`.",
        "schema": PLAN_SCHEMA_ID,
        "name": "demo-reference-ab" if demo else "my-campaign",
        "description": "Reference engine: baseline vs fast profile" if demo else "What this campaign decides",
        "model": {"_comment": "pinned model: id, revision and checkpoint files whose SHA-256 is recorded",
                  "id": "openbmb/MiniCPM-o-4_5", "revision": "503e754207c94da6bb26850b4469f367c9ea3582",
                  "checkpoint_paths": []},
        "gpu": {"_comment": "runs warn when the GPU name differs; null accepts any (or none)", "expected_name": None},
        "engines": engines,
        "workload": {"_comment": "Seed-TTS-format dir (<locale>/meta.lst + pools.json); the holdout pool is "
                                 "reserved at freeze and refused if any id was already requested",
                     "root": "data/sample_workload", "locale": "en", "pool": "tuning", "holdout_pool": "holdout"},
        "sweep": {"_comment": "cells = engine x concurrency x repeat; warmup repeats are discarded; "
                              "restart per_repeat|per_cell|never (never = exploratory); interleave alternate "
                              "runs A,B,A,B for each concurrency and repeat",
                  "concurrencies": [1, 2, 4, 8, 16, 32], "requests_per_run": 16 if demo else 320,
                  "warmup_repeats": 1, "measured_repeats": 3, "restart": "per_repeat",  # as the reference campaign
                  "interleave": "alternate", "timeout_s": 120, "kind": "measured"},
        "sampling": {"seed": 42, "temperature": 0.0, "max_tokens": None},
        "metrics": {"_comment": "throughput = throughput_scale x delivered audio s / wall s (25 = codec tokens/s)",
                    "throughput_scale": 25, "stall_threshold_s": 0.1, "preroll_s": 0.0},
        "quality": {"baseline": base, "candidate": cand, "concurrencies": [1, 16, 32], "pool": "holdout",
                    **_quality_scorers(demo),
                    "margins": {"wer_pp": 0.20, "sim": 0.50, "mos": 0.05}},
        "bootstrap": {"draws": 20000, "seed": 20261022, "method": "percentile", "confidence": 0.95},
        "decision_rules": [{"name": "candidate-exceeds-baseline", "kind": "throughput_exceeds", "candidate": cand,
                            "reference": base, "concurrencies": [16, 32], "confidence": 0.95}],
        "validators": [{"name": "synthetic-controls", "argv": ["campaign", "controls"]}],
    }


def register(sub) -> None:
    p = sub.add_parser("plan", help="write, freeze, verify and amend campaign plans")
    ps = p.add_subparsers(dest="plan_command", metavar="ACTION", required=True)

    init = ps.add_parser("init", help="write a commented plan template")
    init.add_argument("--demo", action="store_true", help="a small plan against the bundled reference engine")
    init.add_argument("-o", "--output", required=True, help="file to write (refuses to overwrite)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(func=cmd_init)

    fr = ps.add_parser("freeze", help="validate, reserve the holdout, store canonical JSON + SHA-256")
    fr.add_argument("plan")
    add_db_arg(fr)
    fr.set_defaults(func=cmd_freeze)

    ve = ps.add_parser("verify", help="does the file still match its frozen hash? shows differing fields")
    ve.add_argument("plan")
    add_db_arg(ve)
    ve.set_defaults(func=cmd_verify)

    ad = ps.add_parser("addendum", help="freeze a change bound to its parent plan hash")
    ad.add_argument("parent", help="parent plan hash (or unique prefix)")
    ad.add_argument("addendum", help=f"addendum JSON ({ADDENDUM_SCHEMA_ID}: parent, name, reason, changes)")
    add_db_arg(ad)
    ad.set_defaults(func=cmd_addendum)

    sh = ps.add_parser("show", help="print a frozen plan (canonical JSON, pretty) and its effective settings")
    sh.add_argument("hash")
    add_db_arg(sh)
    sh.set_defaults(func=cmd_show)

    oh = ps.add_parser("open-holdout", help="open the reserved holdout pool (an audit event)")
    oh.add_argument("plan", help="frozen plan file or hash")
    oh.add_argument("--reason", required=True)
    add_db_arg(oh)
    oh.set_defaults(func=cmd_open_holdout)

    ls = ps.add_parser("list", help="frozen plans and addenda")
    add_db_arg(ls)
    ls.set_defaults(func=cmd_list)


def cmd_init(args) -> int:
    out = Path(args.output)
    if out.exists() and not args.force:
        raise CampaignError(f"{out}: exists; pass --force to overwrite")
    doc = template(args.demo)
    validate_plan_dict(doc, "template")
    out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}; edit it, then `campaign plan freeze {out}`")
    return 0


def cmd_freeze(args) -> int:
    with open_store(args.db) as store:
        res = freeze(store, args.plan)
        print(res.message)
        if res.manifest_hash:
            print(f"workload manifest {res.manifest_hash}")
    return 0


def cmd_verify(args) -> int:
    with open_store(args.db) as store:
        v = verify_plan_file(store, args.plan)
    console = Console()
    print(v.message)
    if v.differences:
        print_rows(["field", "frozen", "file now"], [(p, json.dumps(a), json.dumps(b)) for p, a, b in v.differences],
                   console=console)
    return 0 if v.ok else 1


def cmd_addendum(args) -> int:
    with open_store(args.db) as store:
        res = freeze(store, args.addendum, expected_parent=args.parent)
        print(res.message)
        print(f"parent {res.plan.parent_hash}")
    return 0


def cmd_show(args) -> int:
    with open_store(args.db, read_only=False) as store:
        h = resolve_hash(store, args.hash)
        row = store.query("SELECT kind, name, parent_hash, source_path, frozen_at, frozen_by FROM plans WHERE plan_hash = ?", [h])[0]
        plan = plan_from_store(store, h)
        doc = stored_document(store, h)
        opened = holdout_opened(store, h)
    print(f"{row['kind']} {h}")
    print(f"name {row['name']}  frozen {row['frozen_at']:%Y-%m-%d %H:%M:%S %Z} by {row['frozen_by']}  from {row['source_path']}")
    if row["parent_hash"]:
        print(f"parent {row['parent_hash']}")
    if plan.workload.holdout_pool:
        print(f"holdout pool {plan.workload.holdout_pool!r}: " + (f"opened (audit seq {opened['seq']})" if opened else "reserved (not opened)"))
    print(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))
    if row["kind"] == "addendum":
        print("effective plan (parent + changes):")
        print(json.dumps(plan.raw, indent=2, sort_keys=True, ensure_ascii=False))
    return 0


def plan_for_arg(store, arg: str):
    """A frozen plan from a file path (must match its frozen hash) or a hash prefix."""
    if Path(arg).is_file():
        return frozen_plan_for_file(store, arg)
    return plan_from_store(store, arg)


def cmd_open_holdout(args) -> int:
    with open_store(args.db) as store:
        plan = plan_for_arg(store, args.plan)
        seq, new = open_holdout(store, plan, args.reason)
    if new:
        print(f"holdout pool {plan.workload.holdout_pool!r} of plan {plan.hash[:12]} opened (audit seq {seq})")
    else:
        print(f"holdout pool {plan.workload.holdout_pool!r} of plan {plan.hash[:12]} was already opened (audit seq {seq})")
    return 0


def cmd_list(args) -> int:
    with open_store(args.db) as store:
        rows = store.query("SELECT plan_hash, kind, name, parent_hash, frozen_at FROM plans ORDER BY frozen_at")
    print_rows(["hash", "kind", "name", "parent", "frozen_at"],
               [(r["plan_hash"][:16], r["kind"], r["name"], (r["parent_hash"] or "")[:16], r["frozen_at"]) for r in rows])
    return 0


__all__ = ["register", "template", "plan_for_arg", "read_json"]
