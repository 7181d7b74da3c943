"""`campaign scorers`: every scorer with its status, model folder and model hash;
`campaign scorers run NAME [--model-dir DIR] [--device cpu|cuda] [--format json] ITEM...`: score
arbitrary files through the code `campaign score` uses (stats.quality.scoring.score_files), to
re-score a suspicious output. ITEM: `out.wav` (MOS), `out.wav:prompt.wav` (SIM); WER takes
`--items FILE.csv` (columns audio,text). Nothing is stored. Exit 1 when any item fails."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from console.flags import add_format
from console.output import print_rows
from data.errors import CampaignError


class _IntermixedParser(argparse.ArgumentParser):
    """Lets options sit between ITEMs (`run NAME --json a.wav b.wav`): argparse's intermixed
    parsing for this sub-command (plain parsing would stop collecting ITEMs at the first option)."""

    _inner = False

    def parse_known_args(self, args=None, namespace=None):
        if self._inner:
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def register(sub) -> None:
    p = sub.add_parser("scorers", help="list quality scorers (status, model folder, hash) or score files with one",
                       description="Quality scorers. ACTION: list (the default when none is given): every scorer "
                                   "with its status, model folder and model hash; run NAME ITEM...: score files "
                                   "with one scorer, nothing stored.")
    add_format(p, dest="list_format")
    p.set_defaults(func=cmd_list)
    ps = p.add_subparsers(dest="scorers_command", metavar="ACTION", parser_class=_IntermixedParser)
    ls = ps.add_parser("list", help="every scorer with its status, model folder and model hash (the default)")
    add_format(ls, dest="list_format")
    ls.set_defaults(func=cmd_list)
    run = ps.add_parser("run", help="score files with one scorer (nothing is stored)")
    run.add_argument("name", help="scorer name, e.g. seedtts-sim, utmos22, whisper")
    run.add_argument("items", nargs="*", metavar="ITEM", help="out.wav (MOS) or out.wav:prompt.wav (SIM)")
    run.add_argument("--items", dest="items_csv", metavar="FILE.csv", help="WER items: a CSV with columns audio,text")
    run.add_argument("--model-dir", help="model folder (default: $CAMPAIGN_<SCORER>_DIR)")
    run.add_argument("--device", choices=("cpu", "cuda"), help="torch device (default: cuda if available)")
    run.add_argument("--dtype", choices=("float32", "tf32", "float16"), help="compute dtype where the scorer offers it")
    run.add_argument("--batch-size", type=int, help="items per scorer batch (default: per scorer)")
    add_format(run)
    # deprecated, hidden: the old form, one JSON object per line (scripts read it so)
    run.add_argument("--json", dest="json_lines", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)


def cmd_list(args) -> int:
    from stats.quality.registry import ENV_VARS, SCORERS, make_scorer, model_dir_for

    rows = []
    for name, cls in SCORERS.items():
        s = make_scorer(name, device="cpu")
        ok, why = s.available()
        folder = model_dir_for(name)
        where = str(folder) if folder else (f"(unset: ${ENV_VARS[name]})" if name in ENV_VARS else "(bundled)")
        rows.append((name, cls.scorer_id, cls.metric, "available" if ok else f"unavailable: {why}", where,
                     s.model_hash[:16] if ok else "-"))
    print_rows(["scorer", "scorer_id", "metric", "status", "model folder", "model hash"], rows, args.list_format,
               title="scorers")
    return 0


def _parse_items(args, metric: str) -> list[tuple[str, Path, Path | None, str]]:
    """(label, audio, prompt, text) per item; one-line errors for the wrong shape of item."""
    if metric == "wer":
        if args.items:
            raise CampaignError("WER scorers take --items FILE.csv (columns audio,text), not positional items")
        if not args.items_csv:
            raise CampaignError("WER scorers need --items FILE.csv with columns audio,text")
        path = Path(args.items_csv)
        if not path.is_file():
            raise CampaignError(f"--items {path}: no such file")
        try:
            with path.open(newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                if not reader.fieldnames or not {"audio", "text"} <= set(reader.fieldnames):
                    raise CampaignError(f"--items {path}: needs columns audio,text (has {', '.join(reader.fieldnames or [])})")
                rows = list(reader)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise CampaignError(f"--items {path}: not a readable CSV ({exc})") from None
        base = path.resolve().parent
        return [(r["audio"], _rel(base, r["audio"]), None, r["text"] or "") for r in rows]
    if args.items_csv:
        raise CampaignError(f"--items is for WER scorers; a {metric} scorer takes positional items")
    if not args.items:
        raise CampaignError(f"give at least one item ({'out.wav:prompt.wav' if metric == 'sim' else 'out.wav'})")
    out: list[tuple[str, Path, Path | None, str]] = []
    for it in args.items:
        if metric == "sim":
            audio, sep, prompt = it.rpartition(":")
            if not sep or not audio or not prompt:
                raise CampaignError(f"{it}: a SIM item is out.wav:prompt.wav")
            out.append((it, Path(audio), Path(prompt), ""))
        else:
            out.append((it, Path(it), None, ""))
    return out


def _rel(base: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else base / q


def _precheck(audio: Path, prompt: Path | None) -> str | None:
    """A missing or zero-length file, named, before any model is loaded."""
    for label, p in (("audio", audio), ("prompt", prompt)):
        if p is None:
            continue
        if not p.is_file():
            return f"{label} {p}: no such file"
        if p.stat().st_size == 0:
            return f"{label} {p}: empty file (0 bytes)"
    return None


def cmd_run(args) -> int:
    from stats.quality.base import ScoreItem, ScoreResult
    from stats.quality.registry import UnknownScorer, model_dir_for, scorer_class
    from stats.quality.scoring import score_files

    if args.batch_size is not None and args.batch_size < 1:
        raise CampaignError(f"--batch-size: must be >= 1, got {args.batch_size}")
    try:
        cls = scorer_class(args.name)
    except UnknownScorer as exc:
        raise CampaignError(str(exc)) from None
    items = _parse_items(args, cls.metric)
    folder = Path(args.model_dir) if args.model_dir else model_dir_for(cls.name)
    try:
        scorer = cls(folder, device=args.device, batch_size=args.batch_size, dtype=args.dtype)
    except ValueError as exc:
        raise CampaignError(f"--dtype: {exc}") from None
    problems: dict[int, ScoreResult] = {}
    todo: list[ScoreItem] = []
    for i, (_, audio, prompt, text) in enumerate(items):
        problem = _precheck(audio, prompt)
        if problem:
            problems[i] = ScoreResult.failed(problem)
        else:
            todo.append(ScoreItem("cli", i, audio.stem, audio, text, prompt))
    try:
        scored = score_files(scorer, todo) if todo else []
    finally:
        scorer.close()
    by_index = {**problems, **{item.request_index: res for item, res in zip(todo, scored)}}
    results = [by_index[i] for i in range(len(items))]
    version, model_hash = (scorer.version, scorer.model_hash) if todo else (None, None)
    failed = 0
    rows = []
    for (label, audio, prompt, _), res in zip(items, results):
        ok = res.status == "ok"
        failed += not ok
        rec = {"item": label, "audio": str(audio), "status": res.status, "value": res.value if ok else None,
               "error": res.error, "scorer_id": scorer.scorer_id, "scorer_version": version,
               "model_hash": model_hash}
        if prompt is not None:
            rec["prompt"] = str(prompt)
        if res.hypothesis is not None:
            rec["hypothesis"] = res.hypothesis
        rows.append(rec)
        if not ok:
            print(f"campaign: {label}: {res.error}", file=sys.stderr)
    if args.json_lines:
        for rec in rows:
            print(json.dumps(rec, ensure_ascii=False))
    elif args.format == "json":
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    elif args.format == "csv":
        cols = ["item", "audio", "prompt", "status", "value", "error", "hypothesis", "scorer_id", "scorer_version",
                "model_hash"]
        print_rows(cols, [[r.get(c) for c in cols] for r in rows], "csv")
    else:
        print_rows(["item", "status", "value", "error"],
                   [(r["item"], r["status"], "-" if r["value"] is None else f"{r['value']:.4f}", r["error"] or "")
                    for r in rows], title=f"{scorer.scorer_id} ({version or 'not loaded'})")
    return 1 if failed else 0
