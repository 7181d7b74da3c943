"""`campaign workload show [DIR]`: summarise a Seed-TTS-format workload and report bad lines."""

from __future__ import annotations

from rich.console import Console

from console.output import print_rows
from data.workload import load_workload


def register(sub) -> None:
    p = sub.add_parser("workload", help="inspect workloads")
    wsub = p.add_subparsers(dest="workload_command", metavar="ACTION", required=True)
    show = wsub.add_parser("show", help="summarise a workload directory (default: bundled sample)")
    show.add_argument("dir", nargs="?", help="Seed-TTS-format directory (contains <locale>/meta.lst)")
    show.add_argument("--locale", help="locale sub-directory (default: the only one, or 'en')")
    show.set_defaults(func=cmd_show)


def cmd_show(args) -> int:
    wl = load_workload(args.dir, args.locale)
    console = Console()
    missing = wl.missing_prompt_wavs()
    console.print(f"[bold]workload[/bold] {wl.root}  locale={wl.locale}")
    console.print(f"meta.lst sha256 {wl.meta_sha256()}")
    rows = [
        ("utterances", len(wl.utterances)),
        ("prompt speakers", len(wl.speakers)),
        ("missing prompt wavs", len(missing)),
        ("malformed lines", len(wl.errors)),
    ]
    rows += [(f"pool {name}", len(ids)) for name, ids in sorted(wl.pools.items())]
    print_rows(["item", "count"], rows, "table", console=console)
    for u in missing[:20]:
        console.print(f"[yellow]missing prompt wav[/yellow] {u.utt_id}: {u.prompt_wav}", soft_wrap=True)
    if len(missing) > 20:
        console.print(f"... and {len(missing) - 20} more missing prompt wavs")
    for err in wl.errors:
        console.print(f"[red]bad line[/red] {err}", highlight=False, soft_wrap=True)  # paths stay greppable
    return 1 if wl.errors or missing else 0
