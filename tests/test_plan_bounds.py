"""Bounds on input (issue 11 item 6): non-finite or out-of-range plan numbers are refused at
freeze with the field path and the allowed range; malformed or duplicate meta.lst lines in a
plan's pools and prompt wav paths that leave the workload root are refused with file:line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from data.errors import CampaignError
from data.plan_loading import load_plan
from data.workload import load_workload
from plans_helpers import inproc, make_workload, plan_dict, write_json


@pytest.fixture
def workload(tmp_path):
    return make_workload(tmp_path / "wl")


def cli(*args, db):
    return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)], capture_output=True, text=True)


def _raw_plan(tmp_path, workload, edit) -> str:
    """Plan text with one field's JSON replaced verbatim (NaN and Infinity are not expressible
    through json.dumps with allow_nan=False, and 1e400 is not a Python float)."""
    doc = plan_dict(workload, ports=[18191, 18192])
    marker = "__EDIT__"
    path, key = edit[0], edit[1]
    target = doc
    for part in path:
        target = target[part]
    target[key] = marker
    return json.dumps(doc).replace(f'"{marker}"', edit[2])


@pytest.mark.parametrize("edit, message", [
    ((["sweep"], "timeout_s", "NaN"), "sweep.timeout_s: NaN is not a finite number (allowed: 0 < timeout_s <= 86400)"),
    ((["sweep"], "timeout_s", "Infinity"), "sweep.timeout_s: Infinity is not a finite number"),
    ((["sweep"], "timeout_s", "1e400"), "sweep.timeout_s: Infinity is not a finite number"),
    ((["engines", 0], "health_timeout_s", "-Infinity"), "engines[0].health_timeout_s: -Infinity is not a finite number"),
    ((["metrics"], "throughput_scale", "NaN"), "metrics.throughput_scale: NaN is not a finite number"),
    ((["sweep"], "timeout_s", "1e9"), "sweep.timeout_s: 1000000000.0 is greater than the maximum of 86400"),
    ((["sweep"], "requests_per_run", "1000000000000000000"),
     "sweep.requests_per_run: 1000000000000000000 is greater than the maximum of 100000"),
    ((["sweep"], "measured_repeats", "1000000000"), "sweep.measured_repeats: 1000000000 is greater than the maximum of 1000"),
    ((["sweep"], "warmup_repeats", "1000000000"), "sweep.warmup_repeats: 1000000000 is greater than the maximum of 100"),
    ((["sweep"], "measured_repeats", "2.0"), "sweep.measured_repeats: 2.0 is not of type 'integer'"),
    ((["sweep"], "concurrencies", "[1, 100000]"), "sweep.concurrencies[1]: 100000 is greater than the maximum of 4096"),
    ((["bootstrap"], "draws", "1000000000000"), "bootstrap.draws: 1000000000000 is greater than the maximum of 200000"),
])
def test_out_of_range_numbers_refused_at_freeze(tmp_path, workload, capsys, edit, message):
    path = tmp_path / "plan.json"
    path.write_text(_raw_plan(tmp_path, workload, edit))
    r = inproc(capsys, "plan", "freeze", str(path), db=tmp_path / "c.duckdb")
    assert r.returncode == 2, r.stdout
    assert r.stderr.startswith(f"campaign: error: {path}: {message}"), r.stderr
    assert "Traceback" not in r.stderr


def test_whole_sweep_size_is_bounded(tmp_path, workload, capsys):
    doc = plan_dict(workload, ports=[18191, 18192], concurrencies=list(range(1, 101)), requests=100000, repeats=1000)
    path = write_json(tmp_path / "plan.json", doc)
    r = inproc(capsys, "plan", "freeze", str(path), db=tmp_path / "c.duckdb")
    assert r.returncode == 2
    assert "sweep: 20000000000 requests in all (engines x concurrencies x repeats x requests); at most 10000000" in r.stderr


def test_nan_timeout_cli_subprocess_one_line(tmp_path, workload):
    path = tmp_path / "plan.json"
    path.write_text(_raw_plan(tmp_path, workload, (["sweep"], "timeout_s", "NaN")))
    r = cli("plan", "freeze", str(path), db=tmp_path / "c.duckdb")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"campaign: error: {path}: sweep.timeout_s: NaN is not a finite number (allowed: 0 < timeout_s <= 86400)"]


# -- meta.lst ---------------------------------------------------------------------------------
def _edit_meta(workload, index: int, line: str | None = None, append: str | None = None):
    meta = workload / "en" / "meta.lst"
    lines = meta.read_text().splitlines()
    if line is not None:
        lines[index] = line
    if append is not None:
        lines.append(append)
    meta.write_text("\n".join(lines) + "\n")
    return meta, lines


def test_duplicate_line_in_pool_refused_at_freeze_and_listed(tmp_path, workload, capsys):
    meta = workload / "en" / "meta.lst"
    dup = meta.read_text().splitlines()[1].split("|")
    _, lines = _edit_meta(workload, 0, append="|".join([dup[0], "other prompt", dup[2], "other text"]))
    n = len(lines)
    r = subprocess.run([sys.executable, "-m", "console.cli", "workload", "show", str(workload)], capture_output=True, text=True)
    assert r.returncode == 1 and f"meta.lst:{n}: duplicate utt_id {dup[0]!r} (first on line 2)" in r.stdout
    path = write_json(tmp_path / "plan.json", plan_dict(workload, ports=[18191, 18192]))
    fr = cli("plan", "freeze", str(path), db=tmp_path / "c.duckdb")
    assert fr.returncode == 2
    assert f"{meta}:{n}: duplicate utt_id {dup[0]!r} (first on line 2)" in fr.stderr
    assert "workload: pool 'tuning' includes a malformed meta.lst line" in fr.stderr


def test_malformed_line_in_pool_refused_at_freeze(tmp_path, workload, capsys):
    meta, lines = _edit_meta(workload, 2)
    first = lines[2].split("|")
    _edit_meta(workload, 2, line="|".join(first[:3]))  # the target text is gone: 3 fields
    path = write_json(tmp_path / "plan.json", plan_dict(workload, ports=[18191, 18192]))
    r = inproc(capsys, "plan", "freeze", str(path), db=tmp_path / "c.duckdb")
    assert r.returncode == 2
    assert f"{meta}:3: expected 4 or 5 '|'-separated fields, found 3" in r.stderr
    assert "pool 'tuning'" in r.stderr and "Traceback" not in r.stderr


def test_malformed_line_outside_the_plans_pools_is_listed_not_refused(tmp_path, workload, capsys):
    _edit_meta(workload, 0, append="unpooled-9999|p|prompt-wavs/p0.wav")
    wl = load_workload(workload)
    assert [e.line_no for e in wl.errors] == [13]
    path = write_json(tmp_path / "plan.json", plan_dict(workload, ports=[18191, 18192]))
    assert inproc(capsys, "plan", "freeze", str(path), db=tmp_path / "c.duckdb").returncode == 0


@pytest.mark.parametrize("wav, why", [
    ("/etc/passwd", "is absolute"),
    ("../../../../../../etc/passwd", "leaves the workload root"),
    ("prompt-wavs/../../../outside.wav", "leaves the workload root"),
])
def test_prompt_wav_outside_the_workload_root_refused(tmp_path, workload, capsys, wav, why):
    (tmp_path / "outside.wav").write_bytes((workload / "en" / "prompt-wavs" / "p0.wav").read_bytes())
    meta, lines = _edit_meta(workload, 1)
    parts = lines[1].split("|")
    parts[2] = wav
    _edit_meta(workload, 1, line="|".join(parts))
    wl = load_workload(workload)
    assert parts[0] not in wl.by_id  # never loaded, so never read or sent
    assert [str(e) for e in wl.errors] == [f"{meta}:2: prompt_wav {wav!r} {why} (prompt wavs must be inside {workload.resolve()})"]
    r = subprocess.run([sys.executable, "-m", "console.cli", "workload", "show", str(workload)], capture_output=True, text=True)
    assert r.returncode == 1 and f"meta.lst:2: prompt_wav {wav!r} {why}" in r.stdout
    path = write_json(tmp_path / "plan.json", plan_dict(workload, ports=[18191, 18192]))
    fr = inproc(capsys, "plan", "freeze", str(path), db=tmp_path / "c.duckdb")
    assert fr.returncode == 2 and f"{meta}:2: prompt_wav {wav!r} {why}" in fr.stderr


def test_symlinked_prompt_wav_leaving_the_root_refused(tmp_path, workload):
    (workload / "en" / "prompt-wavs" / "p1.wav").unlink()
    (workload / "en" / "prompt-wavs" / "p1.wav").symlink_to("/etc/passwd")
    wl = load_workload(workload)
    assert [e.line_no for e in wl.errors] == [2] and "leaves the workload root" in wl.errors[0].problem


def test_bounds_hold_for_a_plan_loaded_directly(tmp_path, workload):
    path = tmp_path / "plan.json"
    path.write_text(_raw_plan(tmp_path, workload, (["sweep"], "timeout_s", "NaN")))
    with pytest.raises(CampaignError, match="sweep.timeout_s: NaN is not a finite number"):
        load_plan(path)
