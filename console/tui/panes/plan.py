"""Plan: the frozen plan as a tree, whether its file still matches the frozen hash (changed fields
named), the addenda chain, the holdout (reserved, opened, by which event and after which selection,
used by which runs), the candidates of the plan with their fates (docs/results.md, "Candidates"),
exclusions with reasons, and the audit chain with its events."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static, Tree

from console.tui.panes.base import Pane
from console.tui.widgets import FAIL_STYLE, PASS_STYLE, STALL_STYLE, display_path, num


@dataclass
class PlanView:
    name: str
    hash: str
    kind: str
    frozen_at: str
    document: dict[str, Any]
    file_check: str  # "verified", "altered", "file missing"
    file_detail: str
    chain: list[dict[str, Any]]  # plan + addenda (hash, kind, name, parent)
    holdout: list[str]
    exclusions: list[dict[str, Any]]
    audit_ok: bool
    audit_message: str
    events: list[dict[str, Any]] = field(default_factory=list)
    imported: list[dict[str, Any]] = field(default_factory=list)  # outside figures, marked (data/imported.py)
    windows: list[dict[str, Any]] = field(default_factory=list)  # profiler windows (data/profiler.py)
    candidates: list[dict[str, Any]] = field(default_factory=list)  # data.candidates.plan_record


def load_plan_view(store, plan_hash: str | None = None) -> PlanView | None:
    from data.audit import verify_chain
    from data.manifest import holdout_opened
    from data.plan_freeze import verify_plan_file
    from data.plan_loading import plan_from_store, stored_document
    from data.queries import plan_seq

    row = store.query("SELECT plan_hash, kind, strftime(frozen_at AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S') AS at, "
                      "source_path FROM plans p " + ("WHERE plan_hash = ? " if plan_hash else "")
                      + f"ORDER BY {plan_seq('p')} DESC NULLS LAST LIMIT 1", [plan_hash] if plan_hash else None)
    if not row:
        return None
    r = row[0]
    plan = plan_from_store(store, r["plan_hash"])
    src = r["source_path"]
    shown = display_path(src) if src else "no source path"  # as the user types it (relative under the cwd)
    if src and Path(src).is_file():
        v = verify_plan_file(store, src)
        check = "verified" if v.ok else "altered"
        detail = (f"{shown} matches {plan.hash[:12]}" if v.ok else f"{shown} differs from {(v.frozen_hash or '?')[:12]}: "
                  + ", ".join(p for p, _, _ in v.differences))
    else:
        check, detail = "file missing", f"{shown}: not on this machine; the stored copy is shown"
    chain = store.query("SELECT plan_hash, kind, name, parent_hash, strftime(frozen_at AT TIME ZONE 'UTC', "
                        f"'%Y-%m-%d %H:%M:%S') AS at FROM plans p ORDER BY {plan_seq('p')} NULLS FIRST")
    holdout = []
    pool = plan.workload.holdout_pool
    if pool:
        frozen = store.query("SELECT seq FROM audit_events WHERE kind IN ('plan_frozen', 'addendum_frozen') "
                             "AND plan_hash = ? ORDER BY seq LIMIT 1", [plan.hash])
        holdout.append(f"pool {pool!r} reserved at freeze (audit #{frozen[0]['seq'] if frozen else '?'})")
        opened = holdout_opened(store, plan.hash)
        if opened:
            payload = json.loads(opened["payload_json"] or "{}")
            holdout.append(f"opened by audit #{opened['seq']} ({opened['kind']}) at {str(opened['event_time'])[:19]}: "
                           f"{payload.get('reason', '')}")
            if "selection" in payload:
                holdout.append("after the selection of " + (", ".join(
                    f"{s['candidate']} (#{s['seq']}, because {', '.join(s['verdicts'])})" for s in payload["selection"])
                    or "no candidate"))
        else:
            holdout.append("not opened yet (`campaign plan open-holdout PLAN --reason ...`)")
        used = store.query("SELECT engine, count(*) AS runs FROM runs WHERE plan_hash = ? AND pool = ? GROUP BY ALL "
                           "ORDER BY ALL", [plan.hash, pool])
        holdout.append("used by " + (", ".join(f"{u['engine']} ({u['runs']} runs)" for u in used) or "no run yet"))
    exclusions = store.query("SELECT x.run_id, r.engine, r.concurrency, r.kind, x.reason, x.audit_seq FROM exclusions x "
                             "JOIN runs r USING (run_id) ORDER BY x.audit_seq")
    from data.candidates import plan_record
    from data.manifest import plan_lineage

    candidates, _ = plan_record(store, plan_lineage(store, plan.hash))
    chain_result = verify_chain(store)
    events = store.query("SELECT seq, strftime(event_time AT TIME ZONE 'UTC', '%m-%d %H:%M:%S') AS time, kind, subject "
                         "FROM audit_events ORDER BY seq DESC")
    from data.imported import imported_rows
    from data.profiler import windows

    return PlanView(plan.name, plan.hash, r["kind"], r["at"], stored_document(store, plan.hash) or plan.document(), check,
                    detail, chain, holdout, exclusions, chain_result.ok, chain_result.message, events,
                    imported_rows(store), windows(store), candidates)


def fill_tree(node, value: Any, label: str) -> None:
    """JSON as a tree: objects and lists expand, scalars are leaves `key: value`."""
    if isinstance(value, dict):
        branch = node.add(Text(label, style="bold"), expand=label in ("plan", "quality", "sweep"))
        for k, v in value.items():
            if not str(k).startswith("_"):
                fill_tree(branch, v, str(k))
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        branch = node.add(Text(f"{label} [{len(value)}]", style="bold"))
        for i, v in enumerate(value):
            fill_tree(branch, v, v.get("name", str(i)) if isinstance(v, dict) else str(i))
    else:
        node.add_leaf(Text.assemble((f"{label}: ", "dim"), json.dumps(value, ensure_ascii=False)))


class PlanPane(Pane):
    """The Plan tab."""

    class Loaded(Message):
        def __init__(self, view: PlanView | None) -> None:
            super().__init__()
            self.view = view

    DEFAULT_CSS = """
    PlanPane { height: 1fr; }
    PlanPane #plan-head { height: auto; padding: 0 1; }
    PlanPane #plan-split { height: 1fr; }
    PlanPane #plan-tree { width: 1fr; min-width: 30; }
    PlanPane #plan-side { width: 1fr; }
    PlanPane #plan-facts { height: auto; padding: 0 1; }
    PlanPane #plan-events { height: auto; }
    """

    def __init__(self, db_path: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self.db_path = db_path

    def compose(self) -> ComposeResult:
        yield Static("loading the frozen plan ...", id="plan-head")
        with Horizontal(id="plan-split"):
            yield Tree("plan", id="plan-tree")
            with VerticalScroll(id="plan-side"):
                yield Static("", id="plan-facts")
                yield DataTable(id="plan-events", cursor_type="row")

    def on_mount(self) -> None:
        t = self.query_one("#plan-events", DataTable)
        t.add_column(Text("seq", justify="right"), key="seq")
        for c in ("time (UTC)", "kind", "subject"):
            t.add_column(c, key=c)

    def load(self) -> None:
        self.started(self.load_plan())

    @work(thread=True, exclusive=True, group="plan", name="load-plan", exit_on_error=False)
    def load_plan(self) -> None:
        from console.tui.data import open_read_only

        with open_read_only(self.db_path) as store:
            view = load_plan_view(store)
        self.post_message(self.Loaded(view))

    def show_error(self, text: str) -> None:
        self.query_one("#plan-head", Static).update(Text(f"plan: {text}", style=FAIL_STYLE))

    def on_plan_pane_loaded(self, msg: "PlanPane.Loaded") -> None:
        v = msg.view
        head = self.query_one("#plan-head", Static)
        if v is None:
            head.update("No frozen plan in this store: `campaign plan freeze PLAN` first.")
            return
        style = {"verified": PASS_STYLE, "altered": FAIL_STYLE}.get(v.file_check, STALL_STYLE)
        head.update(Text.assemble((f"{v.kind} {v.name}", "bold"), f"  {v.hash[:16]}  frozen {v.frozen_at} UTC  hash ",
                                  (v.file_check, style), f": {v.file_detail}"))
        tree = self.query_one("#plan-tree", Tree)
        tree.clear()
        tree.root.expand()
        fill_tree(tree.root, v.document, "plan")
        facts = Text()
        facts.append("addenda chain\n", style="bold")
        for p in v.chain:
            mark = "▶ " if p["plan_hash"] == v.hash else "  "
            parent = f" <- {p['parent_hash'][:12]}" if p["parent_hash"] else ""
            facts.append(f"{mark}{p['kind']} {p['plan_hash'][:12]} {p['name'] or ''}{parent}  {p['at']}\n")
        facts.append("holdout\n", style="bold")
        for line in v.holdout or ["no holdout pool in this plan"]:
            facts.append(f"  {line}\n")
        facts.append(f"candidates ({len(v.candidates)})\n", style="bold")
        for c in v.candidates:
            style = {"rejected": FAIL_STYLE, "selected": PASS_STYLE}.get(c["status"], "")
            facts.append(f"  {c['name']} {c['config_sha256'][:12]} ")
            facts.append(c["status"], style=style)
            facts.append(f"{': ' + c['reason'] if c['reason'] else ''}  {len(c['runs'])} runs, "
                         f"{len(c['startup_failures'])} startup failures\n")
        facts.append(f"exclusions ({len(v.exclusions)})\n", style="bold")
        for x in v.exclusions:
            facts.append(f"  {x['run_id']} {x['engine']} C{x['concurrency']} (audit #{x['audit_seq']}): ")
            facts.append(f"{x['reason']}\n", style=STALL_STYLE)
        from data.imported import MARK

        if v.windows:
            facts.append(f"profiler windows ({len(v.windows)})\n", style="bold")
        for w in v.windows:
            facts.append(f"  {w['window_id']} {w['engine']} {w['tool']}: seq {w['start_seq']}.."
                         f"{w['stop_seq'] if w['stop_seq'] is not None else 'open'}\n")
        if v.imported:
            facts.append(f"imported results ({len(v.imported)}): {MARK}, in no aggregate\n", style="bold")
        for r in v.imported:
            facts.append(f"  {r['engine']} C{r['concurrency'] if r['concurrency'] is not None else '-'} {r['metric']} "
                         f"{r['value_text']} {r['unit']} ({r['source']}; {r['reference']})  ")
            facts.append(f"{MARK}\n", style=STALL_STYLE)
        facts.append("audit chain ", style="bold")
        facts.append("OK" if v.audit_ok else "BROKEN", style=PASS_STYLE if v.audit_ok else FAIL_STYLE)
        facts.append(f"  {v.audit_message}")
        self.query_one("#plan-facts", Static).update(facts)
        t = self.query_one("#plan-events", DataTable)
        t.clear()
        for e in v.events:
            t.add_row(num(str(e["seq"])), e["time"], e["kind"], e["subject"] or "", key=str(e["seq"]))
