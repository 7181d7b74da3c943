"""``python -m engine_adapters.reference``: the same engine as ``campaign engine reference``."""

from __future__ import annotations

import argparse
import sys

from engine_adapters.reference.config import add_arguments, config_from_args
from engine_adapters.reference.server import ReferenceEngineError, run_engine


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--self-check" in argv:  # the engine's own check, run as a plan validator (self_check.py)
        from engine_adapters.reference.self_check import main as self_check

        return self_check([a for a in argv if a != "--self-check"])
    parser = argparse.ArgumentParser(prog="python -m engine_adapters.reference",
                                     description="Embedded reference streaming TTS engine.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        run_engine(config_from_args(args))
    except ReferenceEngineError as exc:
        print(f"reference engine: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
