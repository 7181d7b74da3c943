"""Results you can read (issue 32): the demo's HTML report in headless Chromium at 1400 px (no two
axis-label boxes of a figure overlap, measured by the browser on the figures' SVG text; every panel
without data carries its note; the header names host, GPU, driver, engines and time span), the
tick-label fitting at any number of cells, ids whole in `campaign verdicts`, the TUI's run ids."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from console import figures as F
from data.plan_loading import plan_from_store
from data.store import Store
from stats.results.plan_results import load_plan_results

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(900)


def _campaign(*args: str, columns: int = 200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "console.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("cells", [2, 6, 12, 24, 48, 96])
def test_tick_labels_never_overlap_at_any_cell_count(cells):
    """The small-multiple labels of the RTF and stalls figures ('<engine>\\nC<c>' per cell), measured
    by matplotlib after fitting at the size the report saves them."""
    import numpy as np

    labels = [f"ref-engine-{i // 6}\nC{2 ** (i % 6)}" for i in range(cells)]
    fig, axes = F._figure("cells", width=max(8.0, 0.55 * cells + 2), height=4.0)
    ax = axes[0][0]
    ax.bar(np.arange(cells), np.arange(cells) + 1.0)
    ax.set_xticks(np.arange(cells), labels, fontsize=7)
    if cells >= 24:  # without fitting these do overlap: the check below can fail
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig).draw()
        assert F._overlaps(F._label_boxes(fig, ax, "x"), 2.0)
    F.fit_labels(fig)
    fig.set_dpi(110)  # savefig.dpi: the PNG and SVG the report writes
    fig.canvas.draw()
    shown = [t for t in ax.get_xticklabels() if t.get_visible()]
    assert not F._overlaps(F._label_boxes(fig, ax, "x"), 0.0)
    assert len(shown) >= min(cells, 24)  # thinned only when even 90° and the smallest font cannot fit


PROBE = """<!DOCTYPE html><html><head><meta charset=utf-8><style>body{margin:0;width:1400px}
.fig{width:1380px} .fig svg{width:100%;height:auto;display:block}</style></head><body>FIGURES
<script>
const out = [...document.querySelectorAll('.fig')].map(div => {
  const boxes = [...div.querySelectorAll('g[id^="matplotlib.axis"] g[id^="text_"]')].map(g => {
    const r = g.getBoundingClientRect();
    return {t: g.textContent.trim(), x0: r.left, x1: r.right, y0: r.top, y1: r.bottom};
  }).filter(b => b.t && b.x1 > b.x0);
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0) > 0.5 && Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0) > 0.5)
      overlaps.push([a.t, b.t]);
  }
  const panels = [...div.querySelectorAll('svg > g > g[id^="axes_"]')].map(ax => ({
    ticks: ax.querySelectorAll('g[id^="xtick_"], g[id^="ytick_"]').length,
    note: [...ax.querySelectorAll('g[id="empty-note"]')].map(n => n.textContent.trim()).join(' ')}));
  return {key: div.id, labels: boxes.length, overlaps, panels};
});
const pre = document.createElement('pre'); pre.id = 'layout'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script></body></html>"""


def _chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs it through apt)")
    return browser


FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def test_demo_report_at_1400px_has_no_overlapping_labels_and_says_why_panels_are_empty(quick_demo, tmp_path):
    browser = _chromium()
    _, db = quick_demo
    html, figs = tmp_path / "report.html", tmp_path / "figs"
    r = _campaign("report", str(db.parent / "plan.json"), "--db", str(db), "--html", str(html), "--figures", str(figs))
    assert r.returncode == 0, r.stdout + r.stderr
    svgs = sorted(figs.glob("*.svg"))
    assert len(svgs) == 11
    probe = tmp_path / "probe.html"
    probe.write_text(PROBE.replace("FIGURES", "".join(f'<div class="fig" id="{p.stem}">{p.read_text(encoding="utf-8").split("?>", 1)[-1]}'
                                     "</div>" for p in svgs)), encoding="utf-8")
    dom = subprocess.run([browser, *FLAGS, "--window-size=1400,900", "--virtual-time-budget=5000", "--dump-dom",
                          probe.as_uri()], capture_output=True, text=True, timeout=180).stdout
    found = json.loads(re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"')
                       .replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert [f["key"] for f in found] == [p.stem for p in svgs]
    for f in found:
        assert f["overlaps"] == [], f"{f['key']}: overlapping axis labels {f['overlaps']}"
        for p in f["panels"]:  # a panel without ticks has nothing drawn: it says why
            assert p["ticks"] > 0 or p["note"], f"{f['key']}: an empty panel without its note"
    assert sum(f["labels"] for f in found) > 40
    with Store(db, read_only=True) as store:
        res = load_plan_results(store, plan_from_store(store, store.scalar("SELECT plan_hash FROM plans WHERE kind = 'plan'")))
        stalls = sum(r.metrics.stall_count for c in res.cells for r in c.runs)
        failed = sum(r.metrics.failed + r.metrics.truncated for c in res.cells for r in c.runs)
    notes = {f["key"]: " ".join(p["note"] for p in f["panels"]) for f in found}
    assert ("no playback stalls in any aggregate run" in notes["stalls_failures"]) == (stalls == 0)
    assert ("no failed requests" in notes["stalls_failures"]) == (failed == 0)
    # ref-fast is byte-identical to the baseline: its three checks are one line, not three histograms
    assert "every bootstrap replicate equals the estimate (identical arms" in (figs / "quality_replicates.svg").read_text()
    # the header and the page as a user sees it at 1400 px
    text = html.read_text(encoding="utf-8")
    header = re.search(r'<div id="report-header">(.*?)</div>', text, re.S).group(1)
    for field in ("plan hash", "host", "GPU", "driver", "engines", "runs", "dist omni-campaign-console", "UTC"):
        assert field in header, field
    assert "ref-fast</b>: <code>dist omni-campaign-console" in header
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *FLAGS, "--window-size=1400,2400", f"--screenshot={shot}", html.as_uri()],
                   capture_output=True, timeout=180)
    from PIL import Image

    img = Image.open(shot).convert("L")
    assert img.size == (1400, 2400) and len(img.getcolors(maxcolors=1 << 16) or ()) > 50


def test_verdict_ids_are_whole_in_the_verdicts_table(quick_demo):
    _, db = quick_demo
    with Store(db, read_only=True) as store:
        ids = [r["verdict_id"] for r in store.query("SELECT verdict_id FROM verdicts")]
    for columns in (80, 200):
        out = _campaign("verdicts", "--db", str(db), columns=columns).stdout
        for vid in ids:  # on one line, as `campaign export verdict ID` needs it
            assert re.search(rf"(^|\s){re.escape(vid)}(\s|$)", out, re.M), (columns, vid, out[:3000])
        assert "…" not in out
