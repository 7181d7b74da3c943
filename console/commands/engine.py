"""`campaign engine reference ...`: run the embedded reference engine; `campaign engine profiles`: list its profiles."""

from __future__ import annotations

import argparse
from pathlib import Path

from data.errors import CampaignError
from engine_adapters.reference.config import add_arguments, config_from_args


def register(sub) -> None:
    p = sub.add_parser("engine", help="run the embedded reference engine")
    esub = p.add_subparsers(dest="engine_command", metavar="ACTION", required=True)
    ref = esub.add_parser(
        "reference",
        help="serve the offline reference TTS engine in a real engine's wire dialect",
        description="Offline streaming TTS server (espeak-ng) that speaks the vLLM-Omni, SGLang-Omni or raw "
                    "PCM dialect and batches like a GPU engine. Serves until SIGTERM/SIGINT.",
    )
    add_arguments(ref)
    ref.set_defaults(func=cmd_reference)
    prof = esub.add_parser("profiles", help="list the reference engine's profiles")
    prof.add_argument("--profiles-file", type=Path, default=None, help="extra TOML file with [profiles.NAME] tables")
    prof.set_defaults(func=cmd_profiles)


def cmd_reference(args: argparse.Namespace) -> int:
    from engine_adapters.reference.server import ReferenceEngineError, run_engine

    try:
        run_engine(config_from_args(args))
    except ReferenceEngineError as exc:
        raise CampaignError(str(exc)) from None
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from engine_adapters.reference.profiles import ProfileError, load_profiles

    try:
        profiles = load_profiles(args.profiles_file)
    except ProfileError as exc:
        raise CampaignError(str(exc)) from None
    for name in sorted(profiles):
        p = profiles[name]
        faults = ", ".join(f"{k}={v:g}" for k, v in sorted(p.fault_rates.items())) or "none"
        print(f"{name:10s} {p.description}")
        print(f"{'':10s} max_num_seqs={p.max_num_seqs} step={p.step_base_s * 1000:g}+{p.step_per_seq_s * 1000:g}"
              f"*active ms prefill={p.prefill_s * 1000:g} ms chunk={p.chunk_frames} frames "
              f"audio={p.audio} delivery={p.delivery} faults: {faults}")
    return 0
