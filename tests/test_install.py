"""The core install (README "Install"; pyproject.toml): a wheel built from this tree holds every
file the four packages ship, installs into a fresh virtual environment without any extra, and
from there the reference engine serves, `campaign probe` measures it, a plan runs and its HTML
report renders, while torch, transformers, onnxruntime, pocketsphinx and Ray cannot be imported.
A command that needs an extra says which one in one line (data/extras.py).

One wheel and one environment serve the whole module: the install is the slow part (about a
minute: the core's wheels come from the package registry or pip's cache)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from plans_helpers import make_workload, plan_dict, write_json
from reference_server import stop_engine, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("console", "data", "engine_adapters", "stats")
EXTRAS_ONLY = ("torch", "transformers", "onnxruntime", "pocketsphinx", "resemblyzer", "speechmos", "ray")


def _env() -> dict[str, str]:
    """The environment a user's shell has: nothing points Python at this checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _run(argv: list, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """`python -m build --wheel` (plain `pip wheel` where `build` is not installed) of a copy of the
    tree: building in place would leave build/ and *.egg-info in the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in PACKAGES:
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    out = tmp / "dist"
    if importlib.util.find_spec("build") is not None:
        argv = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, src]
    else:
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, src]
    r = _run(argv, cwd=tmp)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (whl,) = out.glob("omni_campaign_console-*.whl")
    return whl


@pytest.fixture(scope="module")
def core(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel and its core dependencies only; its bin/."""
    venv = tmp_path_factory.mktemp("core") / "venv"
    r = _run([sys.executable, "-m", "venv", venv], cwd=venv.parent)
    assert r.returncode == 0, r.stderr
    r = _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile", wheel], cwd=venv.parent,
             timeout=840)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return venv / "bin"


def test_the_wheel_holds_every_file_the_packages_track(wheel):
    """Package data included: the TUI stylesheet, the plan schema, the sample workload (texts and
    prompt WAVs), the reference engine's profiles, beside every module."""
    tracked = subprocess.run(["git", "ls-files", "-z", *PACKAGES], cwd=REPO, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip(f"not a git checkout: {tracked.stderr.strip()}")
    files = {f for f in tracked.stdout.split("\0") if f and (REPO / f).is_file()}
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"console/tui/app.tcss", "data/plan_schema.json", "engine_adapters/reference/profiles.toml",
            "data/sample_workload/en/meta.lst"} <= names
    assert any(n.startswith("data/sample_workload/en/prompt-wavs/") and n.endswith(".wav") for n in names)
    missing = sorted(files - names)
    assert not missing, f"{len(missing)} tracked file(s) not in the wheel: {missing[:10]}"
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [ln for ln in zipfile.ZipFile(wheel).read(meta).decode().splitlines() if ln.startswith("Requires-Dist:")]
    core_reqs = [ln for ln in requires if "extra ==" not in ln]
    assert core_reqs and not [ln for ln in core_reqs for pkg in EXTRAS_ONLY if f" {pkg}" in ln.split(";")[0]], core_reqs
    assert any(ln.startswith("Requires-Dist: torch") and 'extra == "quality"' in ln for ln in requires), requires
    assert not any(ln.startswith("Requires-Dist: torch==") for ln in requires)  # a range, not a pin


def test_the_core_install_has_no_torch_or_ray(core):
    for pkg in EXTRAS_ONLY:
        r = _run([core / "python", "-c", f"import {pkg}"], cwd=core)
        assert r.returncode != 0 and f"No module named '{pkg}'" in r.stderr, (pkg, r.stderr[-500:])
    r = _run([core / "python", "-c", "import console; print(console.__file__)"], cwd=core)
    assert r.returncode == 0 and str(core.parent) in r.stdout, r.stdout + r.stderr  # the installed copy


def test_probe_from_the_core_install_against_its_reference_engine(core, tmp_path):
    proc = subprocess.Popen([str(core / "python"), "-m", "engine_adapters.reference", "--dialect", "vllm-omni",
                             "--profile", "baseline", "--port", "0"], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    engine = wait_ready(proc, "vllm-omni", "baseline")
    try:
        r = _run([core / "campaign", "probe", "--url", engine.url, "--dialect", "vllm-omni", "-c", "2", "-n", "4",
                  "--db", tmp_path / "p.duckdb", "--artifacts", tmp_path / "art", "--no-telemetry",
                  "--json", tmp_path / "m.json"], cwd=tmp_path, timeout=180)
    finally:
        stop_engine(engine)
    assert r.returncode == 0, r.stdout + r.stderr
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert "status complete" in r.stdout and json.dumps(metrics)
    # one FLAC per request; identical outputs share their bytes under audio/ (engine_adapters/driver/decode.py)
    art = tmp_path / "art"
    assert len([p for p in art.rglob("*.flac") if p.relative_to(art).parts[0] != "audio"]) == 4


def test_a_plan_runs_and_reports_from_the_core_install_and_extras_are_named(core, tmp_path):
    """Freeze, run and the HTML report need no extra; `--cluster` and `score` say which extra
    they need in one line, exit 2, and store nothing."""
    doc = plan_dict(make_workload(tmp_path / "wl", short=True), profiles=("baseline",), concurrencies=(1,),
                    requests=2, repeats=1)
    for e in doc["engines"]:
        e["argv"] = [str(core / "python"), "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"

    def campaign(*args: object) -> subprocess.CompletedProcess[str]:
        return _run([core / "campaign", *args, "--db", db], cwd=tmp_path, timeout=300)

    out = {}
    for args in (("plan", "freeze", plan), ("run", plan), ("report", plan, "--html", tmp_path / "r.html")):
        r = campaign(*args)
        assert r.returncode == 0, (args, r.stdout + r.stderr)
        out[args[0]] = r.stdout
    assert "1 run(s) recorded" in out["run"] and "HTML report of plan" in out["report"]
    assert (tmp_path / "r.html").stat().st_size > 10_000

    r = campaign("run", plan, "--cluster", "local")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "campaign: error: --cluster: needs the 'cluster' extra (pip install 'omni-campaign-console[cluster]'): "
        "No module named 'ray'"], r.stdout + r.stderr
    assert campaign("plan", "open-holdout", plan, "--reason", "test").returncode == 0
    r = campaign("score", plan)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
    assert "needs the 'quality' extra (pip install 'omni-campaign-console[quality]'): No module named" in r.stderr
    r = _run([core / "python", "-c", "import duckdb; c = duckdb.connect(r'%s', read_only=True); "
              "print(c.execute('SELECT count(*) FROM quality_scores').fetchone()[0])" % db], cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stdout + r.stderr
