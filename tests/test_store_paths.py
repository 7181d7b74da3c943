"""Paths and stores (issue 26 item 7, item 8's plan JSON): a mistyped --db or plan file creates no
store and says what is missing; `plan freeze` refuses a plan naming a path that does not exist,
naming each; a plan file with a duplicate key or nested 100,000 deep is one line, not a traceback
nor a silent choice. The CLI as a subprocess, real DuckDB files."""

from __future__ import annotations

import json

import pytest
from test_run_exit import _frozen, _plan, campaign

from plans_helpers import write_json

pytestmark = pytest.mark.timeout(240)

READERS = [("sql", "SELECT 1"), ("db", "info"), ("verdicts",), ("runs", "list"), ("report", "PLAN"), ("gate", "PLAN"),
           ("audit", "verify"), ("audit", "log"), ("export", "runs", "-o", "OUT"), ("score", "PLAN"),
           ("plan", "show", "abcdef"), ("plan", "verify", "PLAN"), ("plan", "open-holdout", "PLAN", "--reason", "r"),
           ("runs", "exclude", "abc", "--reason", "r"), ("sql", "--write", "CREATE TABLE t (a INT)")]


def _one_line_error(r, *needles):
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


@pytest.mark.slow  # campaigns run as a user would
def test_a_mistyped_db_creates_no_store(tmp_path):
    plan, _ = _plan(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline",))
    typo = tmp_path / "campain.duckdb"
    for argv in READERS:
        argv = tuple(str(plan) if a == "PLAN" else str(tmp_path / "out.csv") if a == "OUT" else a for a in argv)
        r = campaign(*argv, db=typo)
        _one_line_error(r, f"{typo}: no such database")
        assert not typo.exists(), argv
    # the two that start a campaign's record create it
    assert campaign("plan", "freeze", str(plan), db=typo).returncode == 0 and typo.exists()


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_run_of_a_missing_plan_file_says_so(tmp_path):
    _, _, db = _frozen(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline",))
    r = campaign("run", str(tmp_path / "plna.json"), db=db)
    _one_line_error(r, "plna.json: no such plan file")
    assert "not frozen" not in r.stderr
    fresh = tmp_path / "fresh.duckdb"
    _one_line_error(campaign("run", "plna.json", db=fresh), "plna.json: no such plan file")
    assert not fresh.exists()  # refused before a store is opened
    _one_line_error(campaign("run", "abcdef12", db=db), "plan abcdef12: not frozen")  # a hash is still a hash


@pytest.mark.slow  # 6 s in a loaded `make check`
def test_freeze_refuses_paths_that_do_not_exist(tmp_path):
    """Each path field the plan names, missing, in one line naming field and path; nothing stored."""
    plan, doc = _plan(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline", "fast"))
    gone = tmp_path / "gone"
    doc["model"]["checkpoint_paths"] = [str(gone / "model")]
    doc["engines"][0]["checkpoint_paths"] = [str(tmp_path), str(gone / "ckpt")]  # the first exists
    doc["engines"][1]["config_path"] = str(gone / "deploy.yaml")
    doc["quality"] = {**doc.get("quality", {}), "model_paths": {"utmos22": str(gone / "utmos")}}
    doc["workload"]["pools_file"] = str(gone / "pools.json")
    write_json(plan, doc)
    db = tmp_path / "c.duckdb"
    r = campaign("plan", "freeze", str(plan), db=db)
    _one_line_error(r, "5 path(s) the plan names do not exist",
                    f"model.checkpoint_paths[0]: {gone / 'model'}", f"engines[0].checkpoint_paths[1]: {gone / 'ckpt'}",
                    f"engines[1].config_path: {gone / 'deploy.yaml'}", f"quality.model_paths.utmos22: {gone / 'utmos'}",
                    f"workload.pools_file: {gone / 'pools.json'}")
    assert "checkpoint_paths[0]: " + str(tmp_path) + ";" not in r.stderr
    doc["workload"]["root"] = str(gone / "workload")
    write_json(plan, doc)
    _one_line_error(campaign("plan", "freeze", str(plan), db=db), f"workload.root: {gone / 'workload'}")
    assert campaign("sql", "SELECT count(*) FROM plans", "--format", "csv", db=db).stdout.split() == ["count_star()", "0"]
    for p in (gone / "model", gone / "ckpt", gone / "utmos"):
        p.mkdir(parents=True)
    (gone / "deploy.yaml").write_text("stage_args: []\n")
    (gone / "pools.json").write_text((tmp_path / "wl" / "pools.json").read_text())
    doc["workload"]["root"] = str(tmp_path / "wl")
    doc["engines"][1]["checkpoint_paths"] = doc["engines"][0]["checkpoint_paths"]  # compared engines load the same bytes
    write_json(plan, doc)
    r = campaign("plan", "freeze", str(plan), db=db)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("text, needle", [
    ('{"a": 1, "a": 2}', "duplicate key 'a' at a"),
    ('{"sweep": {"repeats": 3, "x": [{"k": 1, "k": 2}]}}', "duplicate key 'k' at sweep.x[0].k"),
])
def test_plan_with_a_duplicate_key_is_refused_naming_it(tmp_path, text, needle):
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    db = tmp_path / "c.duckdb"
    _one_line_error(campaign("plan", "freeze", str(plan), db=db), f"{plan}: {needle}")


def test_plan_with_a_real_duplicate_field_is_refused(tmp_path):
    """A real plan with `repeats` given twice (the second silently won before)."""
    plan, doc = _plan(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline",))
    text = json.dumps(doc, indent=1).replace('"measured_repeats": 1', '"measured_repeats": 3, "measured_repeats": 1')
    assert text.count('"measured_repeats"') == 2
    plan.write_text(text)
    _one_line_error(campaign("plan", "freeze", str(plan), db=tmp_path / "c.duckdb"),
                    "duplicate key 'measured_repeats' at sweep.measured_repeats")


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_plan_nested_100000_deep_is_one_line(tmp_path):
    plan = tmp_path / "deep.json"
    plan.write_text("[" * 100_000 + "]" * 100_000)
    db = tmp_path / "c.duckdb"
    _one_line_error(campaign("plan", "freeze", str(plan), db=db), f"{plan}: nested too deeply")
    plan.write_text('{"a": ' * 100 + "1" + "}" * 100)  # parses, but deeper than any plan
    _one_line_error(campaign("plan", "freeze", str(plan), db=db), f"{plan}: nested too deeply at a.a.a")
