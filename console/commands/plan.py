"""`campaign plan init|freeze|verify|addendum|show|open-holdout|list`: frozen campaign plans."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

from console.commands.db import add_db_arg
from console.flags import add_format
from console.output import print_rows
from data.bootstrap_params import BOOTSTRAP_DEFAULTS
from data.errors import CampaignError
from data.plan_ids import ADDENDUM_SCHEMA_ID, PLAN_SCHEMA_ID
from data.plan_size import DEFAULT_REQUEST_S, DEFAULT_START_S

HASH_PREFIX = re.compile(r"[0-9a-fA-F]+")  # what a plan hash (prefix) is made of


CONSOLE_DIST = "omni-campaign-console"


def _console_version() -> str:
    """The installed console's version: the reference engine is its code, so a demo engine's
    revision is that version and its source the installed distribution (docs/engines.md,
    "Engine identity and patches")."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(CONSOLE_DIST)
    except PackageNotFoundError:
        raise CampaignError(f"{CONSOLE_DIST} is not installed (pip install -e .); the demo's engines name it as "
                            "their source") from None


def _reference_engine(name: str, profile: str, port: int) -> dict:
    """A demo engine: the bundled reference engine, whose code is the installed console."""
    return {**_engine(name, profile, port), "revision": _console_version(), "source": {"dist": CONSOLE_DIST}}


def _engine(name: str, profile: str, port: int, dialect: str = "vllm-omni") -> dict:
    return {
        "name": name, "adapter": "reference", "revision": "bundled", "profile": profile, "dialect": dialect,
        "argv": [], "env": {}, "host": "127.0.0.1", "port": port, "health_timeout_s": 60,
        "config_path": None, "checkpoint_paths": [],
        "request": {"audio_format": "wav", "voice_prompt": "ref_audio" if dialect == "vllm-omni" else
                    ("ref_audio" if dialect == "sglang-omni" else "audio_url")},
    }


def _quality_scorers(demo: bool) -> dict:
    """The demo scores with the bundled scorers, WER with the workload-domain pocketsphinx model
    built from the sample's texts (the general one cannot hear espeak speech: docs/quality.md,
    "pocketsphinx-domain"); a real campaign with the Seed-TTS protocol's (whisper / seedtts-sim /
    utmos22, docs/quality.md says which files each folder holds)."""
    if demo:
        from data.workload import SAMPLE_WORKLOAD

        return {"scorers": {"wer": "pocketsphinx-domain", "sim": "resemblyzer", "mos": "dnsmos"},
                "_comment": "pocketsphinx-domain is a DOMAIN model: its LM and dictionary are built from the texts "
                            "named in model_paths (the workload), so its WER is not a general ASR's",
                "model_paths": {"pocketsphinx-domain": str(SAMPLE_WORKLOAD)}}  # absolute: freeze resolves it from any cwd
    return {"scorers": {"wer": "whisper", "sim": "seedtts-sim", "mos": "utmos22"},
            "model_paths": {"whisper": "<folder: openai/whisper-large-v3 snapshot>",
                            "seedtts-sim": "<folder: wavlm_large.pt + wavlm_large_finetune.pth>",
                            "utmos22": "<folder: utmos22_strong_step7459_v1.pt>"},
            "dtypes": {}}


REAL_ENGINES = ("vllm-omni", "sglang-omni", "peer")
GPU_PLACEHOLDER = "<GPU name as NVML reports it, e.g. NVIDIA L20X>"  # when NVML sees no GPU here
VLLM_DEPLOY = "<path to minicpmo_4_5_turn.yaml (vllm_omni/deploy/ of the installed vllm-omni)>"


def _source(kind: str) -> dict:
    """What an engine's code is pinned by (docs/engines.md, "Engine identity and patches"): a git
    checkout (its commit, tree and dirty flag are recorded at every launch) or an installed
    distribution (its version). A placeholder, so freeze refuses the template until it is filled
    in; an engine without `source` runs whatever is installed and is recorded `unpinned`."""
    dist = {"vllm-omni": "vllm-omni", "sglang-omni": "sglang-omni"}.get(kind)
    return {"source": f"<{{\"git\": \"{kind} checkout at the engine's revision\"}}"
                      + (f" or {{\"dist\": \"{dist}\"}} (the installed distribution)" if dist else "") + ">",
            "_source": "pinned source: acceptance is INCONCLUSIVE for an unpinned compared engine (docs/plans.md)"}


def _real_engine(kind: str, port: int, admission: int) -> dict:
    """One real engine of `plan init --engines` (docs/engines.md): every value the console cannot
    know is a `<...>` placeholder, and `plan freeze` refuses any that is left. `admission` (the
    sweep's largest concurrency) goes into each argv's admission-limit flag, so the engine admits
    every request of the largest cell at once and its recorded capacity says so."""
    if kind == "vllm-omni":
        return {**_engine("vllm-omni-main", "default", port), "adapter": "vllm_omni", **_source("vllm-omni"),
                "_comment": "vllm serve MODEL --omni --deploy-config YAML; config_path names the same YAML, so its "
                            "hash and its per-stage admission limits are recorded with every launch",
                "revision": "<vllm-omni version or git sha>",
                "_admission": "--max-num-seqs N caps every stage's batch (vLLM's engine flag; vLLM-Omni applies a "
                              "typed flag over each stage of the deploy YAML); the console records "
                              "min(stage max_num_seqs x replicas) as the admission limit (docs/engines.md)",
                "argv": ["vllm", "serve", "<model dir>", "--omni", "--deploy-config", VLLM_DEPLOY,
                         "--max-num-seqs", str(admission), "--host", "127.0.0.1", "--port", str(port)],
                "config_path": VLLM_DEPLOY, "health_timeout_s": 1800,
                "checkpoint_paths": ["<model dir>"]}
    if kind == "sglang-omni":
        return {**_engine("sglang-omni-main", "default", port, "sglang-omni"), "adapter": "sglang_omni", **_source("sglang-omni"),
                "_comment": "options as --stage.section.key value are recorded with every launch",
                "revision": "<sglang-omni git sha>", "health_timeout_s": 1800,
                "_admission": "--thinker-max-running-requests N caps the thinker's running requests (sgl-omni "
                              "serve; older revisions take the dotted --stage.section.key form); the console "
                              "records it as the admission limit (docs/engines.md)",
                "argv": ["sgl-omni", "serve", "--model-path", "<model dir>", "--model-name", "minicpmo",
                         "--thinker-max-running-requests", str(admission), "--host", "127.0.0.1", "--port", str(port)],
                "checkpoint_paths": ["<model dir>"]}
    from engine_adapters.dialects import DIALECTS

    return {**_engine("peer", "<peer profile name>", port, "<" + " | ".join(DIALECTS) + ">"), "adapter": "peer",
            **_source("peer"),
            "_comment": "the peer: any single-GPU MiniCPM-o server you compare against, pinned by git revision and "
                        "profile; nothing beyond its dialect is assumed. Fill in: argv = the command that starts it "
                        "on this port (the console launches it and waits for GET /health; put its admission-limit "
                        "flag here too); profile = a name for its configuration (recorded with every run); "
                        "dialect = its wire format (docs/engines.md), one of: vllm-omni (chat completions with "
                        "SSE audio deltas as vLLM-Omni sends them), sglang-omni (SGLang-Omni's SSE delta.audio), "
                        "pcm (a raw s16le PCM body); revision = its git sha",
            "revision": "<peer git sha>", "health_timeout_s": 1800,
            "argv": ["<peer launch command>", "--port", str(port)], "checkpoint_paths": ["<model dir>"],
            "request": {"audio_format": "wav"}}


# The engines' own repository tests, as `plan init --engines` proposes them (docs/engines.md,
# "Validators" cites the files read): each runs in a checkout of the engine at its revision, with
# the engine's own interpreter, and gates that engine's PASS.
REAL_VALIDATORS = {
    "vllm-omni": {
        "name": "vllm-omni-minicpmo-tests",
        "_comment": "vLLM-Omni's MiniCPM-o 4.5 model tests (tests/model_executor/models/minicpmo_4_5/); "
                    "tests/e2e/online_serving/test_minicpmo_4_5.py serves the model on 2 GPUs",
        "argv": ["<python of the vllm-omni environment>", "-m", "pytest", "-q",
                 "tests/model_executor/models/minicpmo_4_5/test_pipeline.py"],
        "cwd": "<vllm-omni checkout at the engine's revision>", "timeout_s": 1800},
    "sglang-omni": {
        "name": "sglang-omni-minicpmo-unit-tests",
        "_comment": "SGLang-Omni's MiniCPM-o unit tests (tests/README.md: unit_test/ runs without model "
                    "downloads or a server)",
        "argv": ["<python of the sglang-omni environment>", "-m", "pytest", "-q", "tests/unit_test/minicpm_o"],
        "cwd": "<sglang-omni checkout at the engine's revision>", "timeout_s": 1800},
    "peer": {
        "name": "peer-tests",
        "_comment": "EXAMPLE ONLY: the console does not know the peer engine's repository; give its own test command",
        "argv": ["<peer test command>"], "cwd": "<peer checkout>", "timeout_s": 1800},
}
REAL_ENGINE_NAMES = {"vllm-omni": "vllm-omni-main", "sglang-omni": "sglang-omni-main", "peer": "peer"}


def demo_validators(engines: list[str]) -> list[dict]:
    """The demo's validator: the reference engine's self-check (engine_adapters/reference/self_check.py),
    which synthesises one utterance and checks that it decodes to voiced speech."""
    return [{"name": "reference-self-check",
             "argv": ["python", "-m", "engine_adapters.reference", "--self-check"],
             "cwd": ".", "timeout_s": 120, "applies_to": engines}]


def template(demo: bool, real_engines: list[str] | None = None, gpu: str | None = None) -> dict:
    """The plan written by `plan init`; `_comment` keys document each section (JSON has no comments)."""
    if real_engines:  # before the demo engines: a checkout on a GPU host need not be an installed distribution
        return real_template(real_engines, gpu or GPU_PLACEHOLDER)
    if demo:
        engines = [_reference_engine("ref-baseline", "baseline", 8091), _reference_engine("ref-fast", "fast", 8092),
                   _reference_engine("ref-lossy", "lossy", 8093), _reference_engine("ref-peer", "peer", 8094)]
    else:
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
    # the demo judges two candidates against the baseline (lossless `fast`, audibly worse `lossy`)
    # and holds `fast` to a throughput target set by the peer engine
    candidates = {"candidates": [e["name"] for e in engines[1:3]]} if demo else {}
    reference = engines[3]["name"] if demo else base
    return {
        "_comment": "Campaign plan (schema data/plan_schema.json). Keys starting with '_' are comments. "
                    "Freeze with `campaign plan freeze FILE` before measuring; change a frozen plan only "
                    "through `campaign plan addendum HASH FILE`.",
        "schema": PLAN_SCHEMA_ID,
        "name": "demo-reference-ab" if demo else "my-campaign",
        "description": ("Reference engine: baseline as quality reference; fast (lossless) and lossy as candidates; "
                        "fast must exceed the peer's throughput at C16 and C32") if demo else "What this campaign decides",
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
                  # the demo cuts C=2 and C=8 to stay within 10 minutes on 2 cores (README)
                  "concurrencies": [1, 4, 16, 32] if demo else [1, 2, 4, 8, 16, 32],
                  "requests_per_run": 8 if demo else 320,
                  # the demo: at least 2 requests per concurrency slot, 2 discarded warmup requests per run
                  **({"requests_per_slot": 2, "warmup_requests": 2} if demo else {}),
                  "warmup_repeats": 0 if demo else 1, "measured_repeats": 3, "restart": "per_repeat",
                  "interleave": "alternate", "timeout_s": 120, "kind": "measured"},
        "sampling": {"seed": 42, "temperature": 0.0, "max_tokens": None},
        "metrics": {"_comment": "throughput = throughput_scale x delivered audio s / wall s (25 = codec tokens/s)",
                    "throughput_scale": 25, "stall_threshold_s": 0.1, "preroll_s": 0.0},
        "quality": {"baseline": base, "candidate": cand, **candidates, "concurrencies": [1, 16, 32], "pool": "holdout",
                    **_quality_scorers(demo),
                    "margins": {"wer_pp": 0.20, "sim": 0.50, "mos": 0.05}},
        "bootstrap": asdict(BOOTSTRAP_DEFAULTS),
        "decision_rules": [{"name": "fast-exceeds-peer" if demo else "candidate-exceeds-baseline",
                            "kind": "throughput_exceeds", "candidate": cand,
                            "reference": reference, "concurrencies": [16, 32], "confidence": 0.95}],
        "validators": (demo_validators([e["name"] for e in engines]) if demo
                       else [{"name": "synthetic-controls", "argv": ["campaign", "controls"]}]),
        "_selection": "required: the holdout opens only after a candidate is selected on tuning data "
                      "(`campaign candidates select`); a selection after it is post-holdout and acceptance does not PASS",
        "selection": "required",
    }


def real_template(kinds: list[str], gpu: str = "<GPU name>") -> dict:
    """`plan init --engines vllm-omni,sglang-omni,peer`: the engines, the Seed-TTS protocol scorers
    (whisper, seedtts-sim, utmos22) with model-path placeholders, vLLM-Omni main as the quality
    reference and the decision rule "candidate exceeds peer at C16 and C32"."""
    doc = template(False)
    engines = [_real_engine(k, 8091 + i, max(doc["sweep"]["concurrencies"])) for i, k in enumerate(kinds)]
    names = [e["name"] for e in engines]
    reference = "vllm-omni-main" if "vllm-omni-main" in names else names[0]
    candidate = "<candidate engine name (one of: " + ", ".join(n for n in names if n != reference) + ")>"
    doc.update({
        "name": "<campaign name>", "description": "<what this campaign decides>",
        "model": {"_comment": "the checkpoint every engine serves; checkpoint_paths are hashed ('same bytes')",
                  "id": "openbmb/MiniCPM-o-4_5", "revision": "<model revision>", "checkpoint_paths": ["<model dir>"]},
        "gpu": {"_comment": "the run refuses another GPU; the name as NVML reports it (nvidia-smi --query-gpu=name)",
                "expected_name": gpu},
        "engines": engines,
        "workload": {"_comment": "a Seed-TTS test set; pools come from `campaign workload pools` (kept outside "
                                 "the dataset folder; the manifest hashes the file)",
                     "root": "<seed-tts-eval dir (contains en/meta.lst)>", "locale": "en",
                     "pools_file": "<pools.json written by campaign workload pools>",
                     "pool": "tuning", "holdout_pool": "holdout"},
    })
    doc["quality"] = {
        "_comment": "Seed-TTS protocol scorers from local model directories (never downloaded); quality "
                    "reference (baseline) is vLLM-Omni main",
        "baseline": reference, "candidate": candidate, "concurrencies": [1, 16, 32], "pool": "holdout",
        **_quality_scorers(demo=False),
        "margins": {"wer_pp": 0.20, "sim": 0.50, "mos": 0.05}, "allow_truncated": False,
    }
    rules = []
    if "peer" in names:
        rules.append({"name": "candidate-exceeds-peer", "kind": "throughput_exceeds", "candidate": candidate,
                      "reference": "peer", "concurrencies": [16, 32], "confidence": 0.95})
    doc["decision_rules"] = rules
    doc["validators"] = [{**REAL_VALIDATORS[k], "applies_to": [REAL_ENGINE_NAMES[k]]} for k in kinds]
    return doc


def _engine_list(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in REAL_ENGINES]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise CampaignError(f"--engines {text!r}: expected a comma list of distinct {', '.join(REAL_ENGINES)}")
    return kinds


def register(sub) -> None:
    p = sub.add_parser("plan", help="write, freeze, verify and amend campaign plans")
    ps = p.add_subparsers(dest="plan_command", metavar="ACTION", required=True)

    init = ps.add_parser("init", help="write a commented plan template")
    init.add_argument("--demo", action="store_true", help="a small plan against the bundled reference engine")
    init.add_argument("--engines", help="real engines: a comma list of vllm-omni, sglang-omni, peer "
                                        "(placeholders to fill in; freeze refuses any left)")
    init.add_argument("--gpu", metavar="NAME", help="with --engines: the GPU the campaign runs on, as NVML names it "
                                                    "(default: this host's GPU 0 as NVML sees it, else a placeholder)")
    init.add_argument("--request-s", type=float, default=DEFAULT_REQUEST_S, metavar="S",
                      help=f"for the wall-time estimate: seconds a request holds a slot (default {DEFAULT_REQUEST_S:g})")
    init.add_argument("--start-s", type=float, default=DEFAULT_START_S, metavar="S",
                      help=f"for the wall-time estimate: seconds an engine takes to start (default {DEFAULT_START_S:g})")
    init.add_argument("-o", "--output", required=True, help="file to write (refuses to overwrite)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(func=cmd_init)

    fr = ps.add_parser("freeze", help="validate, reserve the holdout, store canonical JSON + SHA-256")
    fr.add_argument("plan")
    _reuse_audit_arg(fr)
    add_db_arg(fr)
    fr.set_defaults(func=cmd_freeze)

    ve = ps.add_parser("verify", help="does the file still match its frozen hash? shows differing fields")
    ve.add_argument("plan")
    add_db_arg(ve)
    ve.set_defaults(func=cmd_verify)

    ad = ps.add_parser("addendum", help="freeze a change bound to its parent plan hash")
    ad.add_argument("parent", help="parent plan hash (or unique prefix)")
    ad.add_argument("addendum", help=f"addendum JSON ({ADDENDUM_SCHEMA_ID}: parent, name, reason, changes)")
    _reuse_audit_arg(ad)
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
    add_format(ls)
    add_db_arg(ls)
    ls.set_defaults(func=cmd_list)


def _print_audited(paths: list[str]) -> None:
    for p in paths:
        print(f"holdout ids absent from {p} (reuse audit)")


def _reuse_audit_arg(p) -> None:
    p.add_argument("--reuse-audit", nargs="+", default=[], metavar="PATH",
                   help="also check the holdout ids against these stores, evidence bundles or per-request CSVs "
                        "(an utt_id column); the sources are recorded in the freeze event (docs/plans.md)")


def cmd_init(args) -> int:
    from data.plan_size import plan_size, size_lines
    from data.plan_validation import placeholder_paths, validate_plan_dict

    out = Path(args.output)
    if out.exists() and not args.force:
        raise CampaignError(f"{out}: exists; pass --force to overwrite")
    kinds = _engine_list(args.engines) if args.engines else None
    if kinds and args.demo:
        raise CampaignError("--demo and --engines: choose one")
    if args.gpu is not None and not kinds:
        raise CampaignError("--gpu: only with --engines (the demo's reference engine accepts any GPU)")
    if args.gpu is not None and not args.gpu.strip():
        raise CampaignError("--gpu: empty GPU name")
    for flag, v in (("--request-s", args.request_s), ("--start-s", args.start_s)):
        if not v >= 0 or v == float("inf"):
            raise CampaignError(f"{flag} {v}: must be a finite number of seconds >= 0")
    doc = template(args.demo, kinds, (args.gpu.strip() if args.gpu else None) or (local_gpu_name() if kinds else None))
    if not kinds:  # a real-engine template holds placeholders (a dialect among them) until edited
        validate_plan_dict(doc, "template")
    out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    left = placeholder_paths(doc)
    if kinds:
        print(f"gpu.expected_name: {doc['gpu']['expected_name']}")
    # the demo's reference engine answers in well under a second: the estimate's defaults are a real engine's
    for line in size_lines(plan_size(doc, _pool_size(doc), args.request_s, args.start_s))[:1 if args.demo else 2]:
        print(line)
    print(f"wrote {out}; " + (f"fill in its {len(left)} <...> placeholders, then " if left else "edit it, then ")
          + f"`campaign plan freeze {out}`")
    return 0


def local_gpu_name() -> str | None:
    """GPU 0's name as NVML sees it on this host (engine_adapters/telemetry.py), or None."""
    from engine_adapters.telemetry import gpu_identity

    gpus, _status = gpu_identity()
    return gpus[0]["name"] if gpus and gpus[0].get("name") else None


def _pool_size(doc: dict) -> int | None:
    """The holdout pool's size when the template names a readable workload (the demo's), else None."""
    from data.plan_validation import placeholder_paths
    from data.workload import load_workload

    w = doc.get("workload") or {}
    pool = (doc.get("quality") or {}).get("pool") or w.get("holdout_pool")
    if not pool or placeholder_paths(w):
        return None
    try:
        return len(load_workload(w["root"], w.get("locale"), w.get("pools_file")).pool(pool))
    except (CampaignError, OSError, KeyError):
        return None


def cmd_freeze(args) -> int:
    from data.plan_freeze import freeze
    from data.store import open_store
    from engine_adapters.sampling import freeze_errors

    from console.candidates import register_plan

    with open_store(args.db, create=True) as store:  # a campaign's record starts here
        res = freeze(store, args.plan, checks=[freeze_errors], reuse_audit=args.reuse_audit)
        register_plan(store, res.plan)  # each engine a proposed candidate (docs/results.md, "Candidates")
        print(res.message)
        if res.manifest_hash:
            print(f"workload manifest {res.manifest_hash}")
        _print_audited(args.reuse_audit)
    return 0


def cmd_verify(args) -> int:
    from rich.console import Console

    from data.plan_freeze import verify_plan_file
    from data.store import open_store

    with open_store(args.db) as store:
        v = verify_plan_file(store, args.plan)
    console = Console()
    print(v.message)
    if v.differences:
        print_rows(["field", "frozen", "file now"], [(p, json.dumps(a), json.dumps(b)) for p, a, b in v.differences],
                   console=console)
    return 0 if v.ok else 1


def cmd_addendum(args) -> int:
    from console.candidates import register_plan
    from data.plan_freeze import freeze
    from data.store import open_store
    from engine_adapters.sampling import freeze_errors

    with open_store(args.db) as store:
        res = freeze(store, args.addendum, expected_parent=args.parent, checks=[freeze_errors],
                     reuse_audit=args.reuse_audit)
        register_plan(store, res.plan)
        print(res.message)
        print(f"parent {res.plan.parent_hash}")
        _print_audited(args.reuse_audit)
    return 0


def cmd_show(args) -> int:
    from data.manifest import holdout_opened
    from data.plan_loading import plan_from_store, resolve_hash, stored_document
    from data.store import open_store

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
        print(json.dumps(plan.document(), indent=2, sort_keys=True, ensure_ascii=False))
    return 0


def plan_for_arg(store, arg: str):
    """A frozen plan from a file path (must match its frozen hash) or a hash prefix."""
    from data.plan_freeze import frozen_plan_for_file
    from data.plan_loading import plan_from_store

    check_plan_arg(arg)
    if Path(arg).is_file():
        return frozen_plan_for_file(store, arg)
    return plan_from_store(store, arg)


def check_plan_arg(arg: str) -> None:
    """Refuse a PLAN argument that is neither a file nor a hash prefix (a mistyped file name is
    "no such plan file", not "not frozen"); checked before any store is opened."""
    if Path(arg).is_file():
        return
    if Path(arg).is_dir():
        raise CampaignError(f"{arg}: is a directory, not a plan file")
    if not HASH_PREFIX.fullmatch(arg.strip()):
        raise CampaignError(f"{arg}: no such plan file (and not a plan hash)")


def cmd_open_holdout(args) -> int:
    from data.manifest import holdout_opened, open_holdout
    from data.store import open_store

    from console.candidates import plan_selection

    with open_store(args.db) as store:
        plan = plan_for_arg(store, args.plan)
        selection = plan_selection(store, plan)
        if plan.selection == "required" and not selection and not holdout_opened(store, plan.hash):
            raise CampaignError(f"plan {plan.hash[:12]}: selection: required, and no candidate of the plan is selected; "
                                "record it first (`campaign candidates select NAME --because VERDICT...`)")
        seq, new = open_holdout(store, plan, args.reason, selection)
    for s in selection if new else []:
        print(f"follows the selection of {s['candidate']} ({s['config_sha256'][:12]}, seq {s['seq']}) "
              f"because {', '.join(s['verdicts'])}")
    if new:
        print(f"holdout pool {plan.workload.holdout_pool!r} of plan {plan.hash[:12]} opened (audit seq {seq})")
    else:
        print(f"holdout pool {plan.workload.holdout_pool!r} of plan {plan.hash[:12]} was already opened (audit seq {seq})")
    return 0


def cmd_list(args) -> int:
    from data.queries import plan_seq
    from data.store import open_store

    with open_store(args.db) as store:
        rows = store.query(f"SELECT plan_hash, kind, name, parent_hash, frozen_at FROM plans p ORDER BY {plan_seq('p')} NULLS FIRST, plan_hash")
    print_rows(["hash", "kind", "name", "parent", "frozen_at"],
               [(r["plan_hash"] if args.format != "table" else r["plan_hash"][:16], r["kind"], r["name"],
                 (r["parent_hash"] or "") if args.format != "table" else (r["parent_hash"] or "")[:16], r["frozen_at"])
                for r in rows], args.format)
    return 0


__all__ = ["register", "template", "plan_for_arg"]
