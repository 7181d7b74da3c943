"""`campaign score PLAN [--scorer NAME ...]`: score every measured output of a plan's quality
cells into `quality_scores` and print coverage; `campaign score --recheck UTT ... [--run RUN]`:
re-transcribe stored outputs and say whether the stored transcript reproduces."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from console.flags import add_format
from console.output import output_console, print_rows
from data.errors import CampaignError

if TYPE_CHECKING:
    from rich.console import Console


def register(sub) -> None:
    p = sub.add_parser("score", help="score speech quality (WER, SIM, MOS) of a plan's quality cells")
    p.add_argument("plan", nargs="?", help="frozen plan JSON (its quality section names cells and scorers)")
    p.add_argument("--scorer", action="append", metavar="NAME",
                   help="scorer to run instead of the plan's (repeatable): pocketsphinx, whisper, resemblyzer, "
                        "wavlm-ecapa, dnsmos, utmos22")
    p.add_argument("--db", help="run store (default: $CAMPAIGN_DB or ./campaign.duckdb)")
    p.add_argument("--artifacts", help="folder holding the output audio (default: 'artifacts' next to the database)")
    p.add_argument("--device", help="torch device for model scorers (default: cuda if available, else cpu)")
    p.add_argument("--batch-size", action="append", metavar="N|NAME=N",
                   help="outputs per scorer batch: N for every scorer, NAME=N for one (repeatable; default: per "
                        "scorer). On an H200: utmos22=256 (docs/quality.md, 'Throughput')")
    p.add_argument("--gaps", type=int, default=20, help="list at most this many gaps (default 20; 0: none)")
    p.add_argument("--strict", action="store_true", help="exit 1 when any expected output lacks a score")
    p.add_argument("--cluster", metavar="local|auto|ray://HOST:PORT",
                   help="one scorer replica per GPU of this Ray cluster, outputs sharded across them; the rows "
                        "are the ones the local path writes (docs/cluster.md)")
    p.add_argument("--recheck", nargs="+", metavar="UTT", help="re-transcribe these utterances' stored outputs")
    p.add_argument("--run", help="with --recheck: only this run")
    add_format(p, help_extra=": csv or json print the quality by cell (--recheck: its table) on stdout, "
                             "everything else on stderr")
    p.set_defaults(func=cmd_score)


def _artifacts(args, store) -> Path:
    from stats.quality.scoring import default_artifacts_dir
    return Path(args.artifacts) if args.artifacts else default_artifacts_dir(store)


def _plan(args, store):
    from data.plan_freeze import frozen_plan_for_file
    return frozen_plan_for_file(store, args.plan)


class PipeProgress:
    """When a scorer's progress is worth a line in a pipe: at each tenth of its total and at the
    end, so a long scoring step says it is alive without a line per batch."""

    STEPS = 10

    def __init__(self) -> None:
        self.last: dict[str, int] = {}

    def due(self, key: str, done: int, total: int) -> bool:
        if total <= 0 or done <= 0:
            return False
        step = done * self.STEPS // total
        if step <= self.last.get(key, 0) and done < total:
            return False
        if done >= total and self.last.get(key) == self.STEPS + 1:
            return False
        self.last[key] = self.STEPS + 1 if done >= total else step
        return True


def batch_sizes(values: list[str] | None) -> tuple[int | None, dict[str, int]]:
    """`--batch-size` values -> (the size for every scorer or None, scorer name -> its own size)."""
    every: int | None = None
    per: dict[str, int] = {}
    for v in values or []:
        name, _, num = v.rpartition("=")
        try:
            n = int(num)
        except ValueError:
            raise CampaignError(f"--batch-size {v}: not N or NAME=N with N a whole number") from None
        if n < 1:
            raise CampaignError(f"--batch-size {v}: must be >= 1, got {n}")
        if name:
            per[name] = n
        else:
            every = n
    return every, per


def cmd_score(args) -> int:
    args.batch_size, args.batch_sizes = batch_sizes(args.batch_size)
    if args.recheck:
        return _recheck(args)
    if not args.plan:
        raise CampaignError("score: give a plan file (or --recheck UTT ...)")
    if not Path(args.plan).is_file():
        raise CampaignError(f"{args.plan}: no such plan file")
    import sys

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from data.store import open_store
    from stats.quality.scoring import score_plan

    console = output_console(stderr=args.format != "table")  # csv/json: stdout holds the cells alone
    lines_to = sys.stdout if args.format == "table" else sys.stderr
    with open_store(args.db) as store:
        plan = _plan(args, store)
        artifacts = _artifacts(args, store)
        wrap = None
        if args.cluster:
            from console.cluster.scoring import cluster_wrapper

            wrap, replicas = cluster_wrapper(args.cluster, plan, args.device)
            console.print(f"scoring on {args.cluster}: {replicas} replica(s) per scorer, one per GPU", highlight=False)
        interactive = console.is_terminal  # a bar per scorer on a terminal, plain lines in a pipe
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TimeRemainingColumn(), console=console, transient=False, disable=not interactive) as progress:
            tasks: dict[str, TaskID] = {}
            lines = PipeProgress()

            def on_start(scorer, n):
                d = scorer.describe()
                label = f"{scorer.scorer_id} ({d['metric']}, {d['device']}, batch {d['batch_size']})"
                tasks[scorer.scorer_id] = progress.add_task(label, total=None)
                if not interactive:
                    print(f"scoring {label}: {n} expected outputs", file=lines_to, flush=True)

            def on_progress(scorer, done, total):
                progress.update(tasks[scorer.scorer_id], completed=done, total=total)
                if not interactive and lines.due(scorer.scorer_id, done, total):
                    print(f"scoring {scorer.scorer_id}: {done}/{total} distinct outputs computed", file=lines_to,
                          flush=True)

            summaries = score_plan(store, plan, scorers=args.scorer, artifacts_dir=artifacts, device=args.device,
                                   batch_size=args.batch_size, batch_sizes=args.batch_sizes, on_start=on_start,
                                   on_progress=on_progress, wrap=wrap)
        print_rows(["scorer", "metric", "expected", "stored before", "computed", "reused", "copied from earlier",
                    "ok", "errors", "not scorable", "s"],
                   [(s.scorer_id, s.metric, s.expected, s.existing, s.computed, s.reused_pass, s.reused_stored,
                     s.scored_ok, s.scored_error,
                     ", ".join(f"{k} {v}" for k, v in sorted(s.not_scorable.items())) or "-", f"{s.seconds:.1f}")
                    for s in summaries], title="scoring pass", console=console)
        console.print("computed: distinct outputs (audio bytes + reference text / prompt) run through the model; "
                      "reused: rows copied from an identical computation in this pass; copied from earlier: rows "
                      "copied from an earlier pass's identical score (same scorer and model)", highlight=False)
        return _print_coverage(console, store, plan, artifacts, args.gaps, args.strict, args.format)


def _fmt(x: float, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{100 * x:.2f}%" if pct else f"{x:.3f}"


def _number(x: float | None, scale: float = 1.0) -> float | None:
    """A figure for CSV/JSON: NaN (not JSON) as None."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x * scale


def _print_coverage(console: Console, store, plan, artifacts: Path, max_gaps: int, strict: bool,
                    fmt: str = "table") -> int:
    from stats.quality.scoring import coverage, scores_frame
    from stats.quality.summary import summarise

    lines, gaps = coverage(store, plan, artifacts)
    frame = scores_frame(store, plan, artifacts)
    ids, labels = frame.attrs["scorers"], frame.attrs["labels"]
    for metric, st in frame.attrs["scorer_status"].items():
        if st != "ok":
            console.print(f"[yellow]{metric}[/yellow] scorer {ids[metric]}: {st}", highlight=False)
    print_rows(["arm", "engine", "C", "metric", "scorer", "expected", "scored", "gaps"],
               [(ln.arm, ln.engine, ln.concurrency, ln.metric, ids["mos" if ln.metric == "mos" else ln.metric],
                 ln.expected, ln.scored, ", ".join(f"{k} {v}" for k, v in sorted(ln.gaps.items())) or "-")
                for ln in lines], title="coverage", console=console)
    cells = summarise(frame)
    if fmt != "table":  # one unit per column (docs/quality.md)
        print_rows(["arm", "engine", "concurrency", "outputs", "gaps", "seed_tts_wer_pct", "corpus_wer_pct", "sim_x100",
                    "mos", "wer_scorer", "sim_scorer", "mos_scorer"],
                   [(c.arm, c.engine, c.concurrency, c.outputs, c.gaps, _number(c.seed_tts_wer, 100),
                     _number(c.corpus_wer, 100), _number(c.sim), _number(c.mos), ids["wer"], ids["sim"], ids["mos"])
                    for c in cells], fmt)
    else:
        print_rows(["arm", "engine", "C", "outputs", "gaps", "Seed-TTS WER (mean per-utt)", "corpus WER (ΣE/ΣN)",
                    f"SIM ({ids['sim']})", f"MOS: {labels['mos']}"],
                   [(c.arm, c.engine, c.concurrency, c.outputs, c.gaps, _fmt(c.seed_tts_wer, True),
                     _fmt(c.corpus_wer, True), _fmt(c.sim), _fmt(c.mos)) for c in cells], title="quality by cell",
                   console=console)
    if gaps and max_gaps:
        print_rows(["run", "req", "utt", "metric", "cause"],
                   [(g["run_id"] or "-", "-" if g["request_index"] is None else g["request_index"], g["utt_id"] or "-",
                     g["metric"], g["cause"]) for g in gaps[:max_gaps]],
                   title=f"gaps ({len(gaps)} total{', first ' + str(max_gaps) if len(gaps) > max_gaps else ''})",
                   console=console)
    if not lines:
        console.print("no quality cells: the plan's quality.baseline/candidate have no measured runs at quality.concurrencies")
    return 1 if strict and (gaps or not lines) else 0


def _recheck(args) -> int:
    from data.rechecks import record as record_recheck
    from data.store import open_store
    from stats.quality.recheck import recheck
    from stats.quality.registry import UnknownScorer, scorer_class

    console = output_console(stderr=args.format != "table")  # csv/json: stdout holds the table alone
    with open_store(args.db) as store:
        paths = {}
        if args.plan:
            paths = dict(_plan(args, store).quality.model_paths)
        try:
            sids = [scorer_class(n).scorer_id for n in args.scorer or []]
        except UnknownScorer as exc:
            raise CampaignError(f"--scorer: {exc}") from None
        results = recheck(store, args.recheck, run_id=args.run, scorer_ids=sids, model_paths=paths,
                          artifacts_dir=_artifacts(args, store), device=args.device)
        recheck_id, seq = record_recheck(store, results)  # stored for the verdicts' diagnostics (data/rechecks.py)
    print_rows(["run", "req", "utt", "scorer", "stored errors", "new errors", "same model", "reproduces",
                "stored transcript", "new transcript"],
               [(r.run_id, r.request_index, r.utt_id, r.scorer_id, r.stored_errors, r.new_errors,
                 "yes" if r.same_model else "NO", "yes" if r.reproduces else "NO", r.stored_hypothesis,
                 r.new_hypothesis if r.new_hypothesis is not None else r.note) for r in results], args.format,
               title="ASR recheck", console=console)
    n_ok = sum(r.reproduces for r in results)
    console.print(f"{n_ok}/{len(results)} stored transcripts reproduce; stored as recheck {recheck_id} (audit seq {seq})")
    return 0 if n_ok == len(results) else 1
