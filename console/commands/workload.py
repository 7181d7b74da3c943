"""`campaign workload show [DIR]`: summarise a Seed-TTS-format workload and report bad lines.
`campaign workload pools DIR --define NAME=START:END ... -o POOLS.json`: define pools by index
slices over the meta.lst order (optionally shuffled with a seed, optionally within an existing
pool) into a file of its own, never into the dataset folder; with `--db`, list which ids of each
pool already appear in stored requests (the reuse audit before a holdout is frozen)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from console.flags import add_format
from console.output import output_console, print_rows
from data.errors import CampaignError


def register(sub) -> None:
    p = sub.add_parser("workload", help="inspect workloads")
    wsub = p.add_subparsers(dest="workload_command", metavar="ACTION", required=True)
    show = wsub.add_parser("show", help="summarise a workload directory (default: bundled sample)")
    show.add_argument("dir", nargs="?", help="Seed-TTS-format directory (contains <locale>/meta.lst)")
    show.add_argument("--locale", help="locale sub-directory (default: the only one, or 'en')")
    add_format(show)
    show.set_defaults(func=cmd_show)
    pools = wsub.add_parser("pools", help="define pools by index slices over meta.lst into a pools file")
    pools.add_argument("dir", help="Seed-TTS-format directory (contains <locale>/meta.lst)")
    pools.add_argument("--locale", help="locale sub-directory (default: the only one, or 'en')")
    pools.add_argument("--define", action="append", required=True, metavar="NAME=START:END",
                       help="a pool: utterances START..END-1 of the order (0-based; a=32:96 = meta.lst lines 33-96)")
    pools.add_argument("--shuffle", type=int, metavar="SEED",
                       help="slice a seeded permutation (numpy default_rng(SEED).permutation) instead")
    pools.add_argument("--from", dest="from_pool", metavar="POOL",
                       help="slice within this pool of the workload's pools.json (or of --pools-file)")
    pools.add_argument("--pools-file", help="existing pools file that --from reads (default: DIR/pools.json)")
    pools.add_argument("-o", "--output", required=True, help="pools file to write ({name: [ids]})")
    pools.add_argument("--db", help="run store to audit: which pool ids already appear in stored requests")
    add_format(pools)
    pools.set_defaults(func=cmd_pools)


def cmd_show(args) -> int:
    from data.workload import load_workload

    wl = load_workload(args.dir, args.locale)
    console = output_console(stderr=args.format != "table")  # csv/json: stdout holds the table alone
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
    print_rows(["item", "count"], rows, args.format, console=console)
    for u in missing[:20]:
        console.print(f"[yellow]missing prompt wav[/yellow] {u.utt_id}: {u.prompt_wav}", soft_wrap=True)
    if len(missing) > 20:
        console.print(f"... and {len(missing) - 20} more missing prompt wavs")
    for err in wl.errors:
        console.print(f"[red]bad line[/red] {err}", highlight=False, soft_wrap=True)  # paths stay greppable
    return 1 if wl.errors or missing else 0


def cmd_pools(args) -> int:
    from data.workload import define_pools, load_workload, parse_pool_define

    wl = load_workload(args.dir, args.locale, args.pools_file)
    slices = [parse_pool_define(d) for d in args.define]
    source = f"{wl.meta_path}"
    order = [u.utt_id for u in wl.utterances]
    if args.from_pool:
        if args.from_pool not in wl.pools:
            raise CampaignError(f"--from {args.from_pool!r}: no such pool (have: {', '.join(sorted(wl.pools)) or 'none'})")
        order, source = list(wl.pools[args.from_pool]), f"pool {args.from_pool!r}"
    pools = define_pools(order, slices, args.shuffle, source)
    reused = _stored_ids(args.db, pools) if args.db else None
    out = Path(args.output)
    tmp = out.with_name(out.name + ".part")
    try:
        tmp.write_text(json.dumps(pools, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:
        raise CampaignError(f"{out}: cannot write ({exc.strerror})") from None
    console = output_console(stderr=args.format != "table")  # csv/json: stdout holds the table alone
    how = f"{source}" + (f", shuffled with seed {args.shuffle}" if args.shuffle is not None else "")
    console.print(f"{out}: {len(pools)} pool(s) from {how}", highlight=False)
    rows = [(name, len(ids), ids[0], ids[-1]) + ((len(reused[name]),) if reused is not None else ())
            for name, ids in pools.items()]
    print_rows(["pool", "ids", "first", "last"] + (["in stored requests"] if reused is not None else []), rows,
               args.format, console=console)
    names = list(pools)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = set(pools[a]) & set(pools[b])
            if both:
                console.print(f"[yellow]overlap[/yellow] pools {a!r} and {b!r} share {len(both)} id(s)", highlight=False)
    for name, ids in (reused or {}).items():
        if ids:
            console.print(f"[red]reused[/red] pool {name!r}: {len(ids)} id(s) already in stored requests: "
                          f"{', '.join(ids)}", highlight=False, soft_wrap=True)
    return 0


def _stored_ids(db: str, pools: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per pool, its ids that appear in any stored request (pool order)."""
    from data.store import open_store

    if not Path(db).exists():
        raise CampaignError(f"--db {db}: no such database")
    with open_store(db, read_only=True) as store:
        seen = {r["utt_id"] for r in store.query("SELECT DISTINCT utt_id FROM requests")}
    return {name: [i for i in ids if i in seen] for name, ids in pools.items()}
