"""Quality under load (issue 31): WER, SIM and MOS per engine at every measured concurrency with
percentile bootstrap intervals over utterance ids (stats/results/quality_load.py), checked against
numpy on the stored scores, in the HTML report (headless Chromium: the figure drawn, no two axis
labels overlapping, a screenshot holding its points) and in the TUI's Report tab.

The store: the results layer's synthetic campaign with quality runs of both arms on the holdout at
C1, C2 and C4 (scored), a plan whose gate judges only C1 and C4, a sweep that also measures C8 (no
quality run there), and one excluded holdout run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from results_store import build_campaign
from test_report_layout import FLAGS, PROBE

from console import figures as F
from console.cli import main
from data.plan_loading import plan_from_store
from data.queries import exclude_run
from data.store import Store
from stats.results.quality_load import NO_RUN, quality_under_load

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(600)
EXCLUDED = "fast-q2-r1"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality_load")
    db, plan = build_campaign(root, concurrencies=(1, 2, 4, 8), repeats=3, quality_concurrencies=(1, 2, 4),
                              gated=(1, 4), gate=False, gpu=False)
    with Store(db) as store:
        exclude_run(store, EXCLUDED, "GPU shared with another job")
    return root, db, plan


def _load(db: Path):
    with Store(db, read_only=True) as store:
        plan = plan_from_store(store, store.scalar("SELECT plan_hash FROM plans WHERE kind = 'plan'"))
        return plan, quality_under_load(store, plan)


def _independent(db: Path, plan) -> dict[tuple[str, int, str], tuple[float, float, float, int]]:
    """(engine, C, metric) -> (estimate, low, high, ids), from the stored rows with plain SQL and numpy:
    per utterance id, repeats summed (WER counts) or averaged (SIM, MOS); the protocol's index matrix."""
    with Store(db, read_only=True) as store:
        rows = store.query(
            "SELECT r.engine, r.concurrency, q.utt_id, q.metric, q.value, "
            "q.wer_substitutions + q.wer_deletions + q.wer_insertions AS e, q.wer_ref_words AS n "
            "FROM quality_scores q JOIN runs r USING (run_id) WHERE r.plan_hash = ? AND r.kind = 'measured' "
            "AND r.status = 'complete' AND r.pool = 'holdout' AND q.status = 'ok' "
            "AND r.run_id NOT IN (SELECT run_id FROM exclusions)", [plan.hash])
    b = plan.bootstrap
    out = {}
    for key in {(r["engine"], r["concurrency"], r["metric"]) for r in rows}:
        mine = [r for r in rows if (r["engine"], r["concurrency"], r["metric"]) == key]
        ids = sorted({r["utt_id"] for r in mine})
        idx = np.random.default_rng(b.seed).integers(0, len(ids), (b.draws, len(ids)))
        if key[2] == "wer":
            e = np.array([sum(r["e"] for r in mine if r["utt_id"] == u) for u in ids], float)
            n = np.array([sum(r["n"] for r in mine if r["utt_id"] == u) for u in ids], float)
            point, reps = 100 * e.sum() / n.sum(), 100 * e[idx].sum(axis=1) / n[idx].sum(axis=1)
        else:
            x = np.array([np.mean([r["value"] for r in mine if r["utt_id"] == u]) for u in ids])
            point, reps = x.mean(), x[idx].mean(axis=1)
        low, high = np.quantile(reps, [(1 - b.confidence) / 2, (1 + b.confidence) / 2])
        out[key] = (float(point), float(low), float(high), len(ids))
    return out


def test_levels_equal_numpy_on_the_stored_scores_at_every_measured_concurrency(campaign):
    _, db, _ = campaign
    plan, ql = _load(db)
    want = _independent(db, plan)
    assert ql.concurrencies == (1, 2, 4, 8) and ql.gated == (1, 4)  # every measured C, not only the gated ones
    assert ql.engines == ("ref-baseline", "ref-fast")
    assert {(e, c) for e, c, _ in want} == {(e, c) for e in ql.engines for c in (1, 2, 4)}
    for cell in ql.cells:
        for m, lv in cell.levels.items():
            if cell.concurrency == 8:  # measured by the sweep, never by a quality run: says so
                assert lv is None and cell.runs == 0 and cell.note(m) == NO_RUN
                continue
            point, low, high, k = want[(cell.engine, cell.concurrency, m)]
            assert lv is not None and lv.ids == k == 6
            assert (lv.value, lv.low, lv.high) == pytest.approx((point, low, high), rel=1e-12, abs=1e-12)
            assert lv.low < lv.value < lv.high
    excluded = ql.cell("ref-fast", 2)
    assert excluded is not None and excluded.runs == 2 and excluded.levels["wer"].outputs == 12  # the excluded run left out
    # under load the synthetic store makes more word errors: the curve the figure draws rises
    assert [ql.cell("ref-baseline", c).levels["wer"].value for c in (1, 2, 4)] == sorted(
        ql.cell("ref-baseline", c).levels["wer"].value for c in (1, 2, 4))
    assert ql.header("mos") == "MOS (DNSMOS OVRL (P.835))" and ql.header("wer") == "WER (%)"


def test_the_text_report_shows_the_same_table(campaign):
    """`campaign report` printed no quality-under-load table while the HTML report and the TUI did:
    the same cells, from the same computation, with the numbers checked here against numpy."""
    _, db, _ = campaign
    plan, ql = _load(db)
    want = _independent(db, plan)
    out = subprocess.run([sys.executable, "-m", "console.cli", "report", plan.hash, "--db", str(db)],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    text = out.stdout[out.stdout.index("Quality under load: quality runs (pool holdout)"):]
    assert text.splitlines()[0].endswith(f"95 % percentile bootstrap over utterance ids, B={plan.bootstrap.draws}; * gated")
    rows = {tuple(x[:2]): x[2:] for x in ([c.strip() for c in line.strip("│ ").split("│")]
                                          for line in text.splitlines() if line.startswith("│ ref-"))}
    assert sorted(rows) == sorted((e, f"C{c}" + ("*" if c in (1, 4) else "")) for e in ql.engines for c in (1, 2, 4, 8))
    for (engine, conc), cells in rows.items():
        c = int(conc.strip("C*"))
        if c == 8:
            assert cells == ["0", "no quality run", "no quality run", "no quality run"]
            continue
        for metric, cell in zip(("wer", "sim", "mos"), cells[1:]):
            point, low, high, k = want[(engine, c, metric)]
            d = {"wer": 2, "sim": 2, "mos": 3}[metric]
            assert cell == f"{point:.{d}f} [{low:.{d}f}, {high:.{d}f}] {k} ids", (engine, c, metric)


def test_unscored_panels_say_why(campaign, tmp_path):
    _, db, _ = campaign
    copy = tmp_path / "c.duckdb"
    shutil.copy(db, copy)
    with Store(copy) as store:
        store.con.execute("DELETE FROM quality_scores WHERE metric = 'mos'")
    _, ql = _load(copy)
    assert all(c.levels["mos"] is None for c in ql.cells) and ql.cell("ref-fast", 1).note("mos") == "not scored"
    fig = F.fit_labels(F.quality_load_figure(ql).figure)
    notes = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == F.EMPTY_NOTE]
    assert notes == ["not scored: no ok dnsmos score in the quality runs"]


LOCATE = """<script>
window.addEventListener('load', () => {
  const f = document.getElementById('fig-quality_load'), img = f.querySelector('img'), r = img.getBoundingClientRect();
  const cells = [...document.querySelectorAll('#quality-load tbody tr')].map(tr => [...tr.cells].map(td => td.innerText));
  const pre = document.createElement('pre'); pre.id = 'where';
  pre.textContent = JSON.stringify({x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height,
                                    nw: img.naturalWidth, caption: f.querySelector('figcaption').innerText, cells});
  document.body.appendChild(pre);
});
</script></body>"""


def _dom_json(browser: str, page: Path, pre: str, width: int) -> object:
    dom = subprocess.run([browser, *FLAGS, f"--window-size={width},900", "--virtual-time-budget=5000", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=180).stdout
    text = re.search(rf'<pre id="{pre}">(.*?)</pre>', dom, re.S).group(1)
    return json.loads(text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_html_report_draws_quality_under_load_in_chromium(campaign, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs it through apt)")
    _, db, plan_path = campaign
    html, figs = tmp_path / "report.html", tmp_path / "figs"
    assert main(["report", str(plan_path), "--db", str(db), "--html", str(html), "--figures", str(figs)]) == 0
    _, ql = _load(db)
    # the figure's SVG: every axis label measured by the browser, none overlapping, every panel drawn
    svg = (figs / "quality_load.svg").read_text(encoding="utf-8").split("?>", 1)[-1]
    probe = tmp_path / "probe.html"
    probe.write_text(PROBE.replace("FIGURES", f'<div class="fig" id="quality_load">{svg}</div>'), encoding="utf-8")
    [found] = _dom_json(browser, probe, "layout", 1400)
    assert found["overlaps"] == [], found["overlaps"]
    assert len(found["panels"]) == 3 and all(p["ticks"] > 0 and not p["note"] for p in found["panels"])
    ticks = re.findall(r'<g id="xtick_\d+">.*?<text [^>]*>(\w+)</text>', svg, re.S)
    assert ticks == ["1", "2", "4", "8"] * 3  # C8 is on the axis though no quality run measured it
    for title in ("WER (%)", "SIM (x100)", "MOS (DNSMOS OVRL (P.835))", "ref-baseline", "ref-fast"):
        assert title in svg
    # the page: the figure shown with its caption, and the table's cells are the computation's text
    page = tmp_path / "page.html"
    page.write_text(html.read_text(encoding="utf-8").replace("</body>", LOCATE), encoding="utf-8")
    where = _dom_json(browser, page, "where", 1400)
    assert where["nw"] > 1000 and where["w"] > 800 and where["h"] > 200, where
    assert "every measured concurrency (C1, C2, C4, C8; the gate judges C1, C4)" in where["caption"]
    assert "ref-fast C8 (no quality run)" in where["caption"]
    shown = {(r[0], r[1]): r[3:] for r in where["cells"]}
    for cell in ql.cells:
        row = shown[(cell.engine, f"C{cell.concurrency}" + (" (gated)" if cell.concurrency in (1, 4) else ""))]
        for text, m in zip(row, ("wer", "sim", "mos")):
            t = cell.text(m)
            assert text.split("\n") == [t.value, t.interval] if t.interval else text == t.value
    # a screenshot of the page as a reader sees it: the figure's region holds both engines' colours
    height = int(where["y"] + where["h"] + 50)
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *FLAGS, f"--window-size=1400,{height}", f"--screenshot={shot}", html.as_uri()],
                   capture_output=True, timeout=180)
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    assert img.size == (1400, height)
    region = np.asarray(img.crop((int(where["x"]), int(where["y"]), int(where["x"] + where["w"]),
                                  int(where["y"] + where["h"]))), dtype=int)
    for colour in ((0x1F, 0x77, 0xB4), (0xD6, 0x27, 0x28)):  # ref-baseline, ref-fast (console/figures.py PALETTE)
        close = (np.abs(region - np.array(colour)).sum(axis=2) < 40).sum()
        assert close > 200, (colour, close)


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_tui_report_tab_shows_the_same_cells(campaign, monkeypatch):
    from textual.widgets import DataTable, TabbedContent

    from console.tui.app import CampaignApp

    _, db, _ = campaign
    _, ql = _load(db)

    async def run():
        app = CampaignApp(db)
        async with app.run_test(size=(200, 60)) as pilot:
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            await pilot.press("2")
            await pilot.pause()
            table = app.query_one(".quality-load-table", DataTable)
            assert "quality under load" in str(table.border_title)
            shown = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)], \
                [str(c.label) for c in table.columns.values()]
            table.focus()  # enter on a cell lists its runs, as the report's tables do
            table.move_cursor(row=5)  # ref-fast, C2
            await pilot.press("enter")
            await pilot.pause()
            assert app.query_one(TabbedContent).active == "runs"
            runs = app.query_one("#runs-table", DataTable)
            assert "fast-q2-r0" in {str(k.value) for k in runs.rows} and "fast-q1-r0" not in {str(k.value) for k in runs.rows}
            return shown

    rows, head = asyncio.run(run())
    assert head == ["engine", "C", "runs", "WER (%)", "SIM (x100)", "MOS (DNSMOS OVRL (P.835))"]
    assert len(rows) == len(ql.cells) == 8
    for row, cell in zip(rows, ql.cells):
        assert row[:3] == [cell.engine, f"C{cell.concurrency}" + ("*" if cell.concurrency in (1, 4) else ""),
                           str(cell.runs)]
        for text, m in zip(row[3:], ("wer", "sim", "mos")):
            t = cell.text(m)
            assert text == (f"{t.value}\n{t.interval}" if t.interval else t.value)
