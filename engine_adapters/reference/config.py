"""Launch options of the reference engine, shared by ``campaign engine reference`` and
``python -m engine_adapters.reference`` so both accept exactly the same arguments."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from engine_adapters.identity import LAUNCH_ID_ENV
from engine_adapters.reference.chat_request import DIALECTS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8091
DEFAULT_MODEL_NAME = "reference-tts"


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to run one engine process (see :func:`add_arguments` for each option's meaning)."""

    dialect: str
    profile: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    device: str = "cpu"
    profiles_file: Path | None = None
    model_name: str = DEFAULT_MODEL_NAME
    emit_log: Path | None = None
    access_log: bool = False
    launch_id: str | None = None  # reported by /health so the console knows it is its own launch
    dump_tensors: Path | None = None  # per-request intermediate arrays go under it (tensors.py)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the engine's options to ``parser``."""
    parser.add_argument("--dialect", required=True, choices=DIALECTS,
                        help="wire dialect to speak (docs/engines.md)")
    parser.add_argument("--profile", default="baseline",
                        help="behaviour profile from profiles.toml or --profiles-file (default: baseline)")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default: {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to bind; 0 picks a free one (default: {DEFAULT_PORT})")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda adds real bf16 GPU work per decode step, sized by the batch")
    parser.add_argument("--profiles-file", type=Path, default=None,
                        help="extra TOML file with [profiles.NAME] tables (also: $REFERENCE_ENGINE_PROFILES)")
    parser.add_argument("--served-model-name", dest="model_name", default=DEFAULT_MODEL_NAME,
                        help=f"model id reported by /v1/models and in chunks (default: {DEFAULT_MODEL_NAME})")
    parser.add_argument("--emit-log", type=Path, default=None,
                        help="append one JSON line per audio write (request id, chunk index, emit_ns); "
                             "the only emit stamps the pcm dialect has")
    parser.add_argument("--access-log", action="store_true", help="log every HTTP request to stderr")
    parser.add_argument("--launch-id", default=os.environ.get(LAUNCH_ID_ENV) or None,
                        help=f"identity reported by /health (default: ${LAUNCH_ID_ENV}, which the console sets per launch)")
    parser.add_argument("--dump-tensors", type=Path, default=None, metavar="DIR",
                        help="write each request's intermediate arrays (.npy) under DIR/NAME when it carries "
                             "the header X-Dump-Tensors: NAME (docs/equivalence.md)")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The :class:`EngineConfig` for arguments parsed with :func:`add_arguments`."""
    return EngineConfig(
        dialect=args.dialect, profile=args.profile, host=args.host, port=args.port, device=args.device,
        profiles_file=args.profiles_file, model_name=args.model_name, emit_log=args.emit_log,
        access_log=args.access_log, launch_id=args.launch_id, dump_tensors=args.dump_tensors,
    )
