"""Engine env secrets (issue 11 item 5): a plan's `engines[].env` values and the variables it
passes through never reach a stored table, an export, a log or the console's output; the engine
still receives the real values. Real campaign: reference engines, real HTTP, real DuckDB, the CLI
as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import duckdb
import pytest

from data.plan_hashing import document_hash
from plans_helpers import make_workload, plan_dict, write_json

pytestmark = pytest.mark.timeout(240)


def campaign(*args, db, env=None):
    return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)],
                          capture_output=True, text=True, env=env)


def _reporting_argv(engine: dict, var: str, seen: Path) -> list[str]:
    """The reference engine behind a one-line shell prologue that writes what `var` holds to
    `seen`: how the test learns what the engine process received."""
    return ["sh", "-c", f'printf "%s\\n" "${var}" >> "$0"; exec "$@"', str(seen), sys.executable, "-m",
            "engine_adapters.reference", "--dialect", engine["dialect"], "--profile", engine["profile"],
            "--host", "127.0.0.1", "--port", str(engine["port"])]


def _secret_plan(tmp_path: Path, inline: str) -> tuple[Path, dict]:
    wl = make_workload(tmp_path / "wl", short=True)
    doc = plan_dict(wl, concurrencies=(1,), requests=2, repeats=2)
    base, fast = doc["engines"]
    base["argv"] = _reporting_argv(base, "OMNI_TEST_SECRET", tmp_path / "seen-inline.txt")
    base["env"] = {"OMNI_TEST_SECRET": inline, "OMNI_PLAIN": "1"}
    fast["argv"] = _reporting_argv(fast, "OMNI_PASS_SECRET", tmp_path / "seen-pass.txt")
    fast["env_passthrough"] = ["OMNI_PASS_SECRET"]
    del doc["quality"]["baseline"], doc["quality"]["candidate"]  # the gate issues the rule verdict only
    doc["quality"]["concurrencies"] = [1, 16, 32]  # where the built-in synthetic controls are drawn
    doc["decision_rules"] = [{"name": "fast-exceeds-baseline", "kind": "throughput_exceeds", "candidate": fast["name"],
                              "reference": base["name"], "concurrencies": [1]}]
    return write_json(tmp_path / "plan.json", doc), doc


def _db_hits(db: Path, needles: list[str]) -> list[str]:
    """table.column of every stored value (any column cast to text) that contains a needle."""
    hits = []
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        for t in tables:
            for (col,) in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ?", [t]).fetchall():
                for needle in needles:
                    n = con.execute(f'SELECT count(*) FROM "{t}" WHERE CAST("{col}" AS VARCHAR) LIKE ?',
                                    [f"%{needle}%"]).fetchone()[0]
                    if n:
                        hits.append(f"{t}.{col}")
    finally:
        con.close()
    return hits


def _file_hits(root: Path, needles: list[str], skip: set[Path]) -> list[str]:
    return [str(p) for p in sorted(root.rglob("*")) if p.is_file() and p not in skip
            and any(n.encode() in p.read_bytes() for n in needles)]


@pytest.mark.slow  # a full campaign
def test_real_campaign_never_stores_exports_or_logs_an_env_value(tmp_path):
    inline = f"inline-secret-{uuid.uuid4().hex}"
    passed = f"passed-secret-{uuid.uuid4().hex}"
    plan, doc = _secret_plan(tmp_path, inline)
    db = tmp_path / "c.duckdb"
    env = {**os.environ, "OMNI_PASS_SECRET": passed}
    outputs = []

    def cli(*args):
        r = campaign(*args, db=db, env=env)
        outputs.append(r.stdout + r.stderr)
        return r

    fr = cli("plan", "freeze", str(plan))
    assert fr.returncode == 0, fr.stderr
    run = cli("run", str(plan))
    assert run.returncode == 0, run.stdout + run.stderr
    assert cli("plan", "verify", str(plan)).returncode == 0
    h = re.search(r"[0-9a-f]{64}", fr.stdout).group(0)
    assert cli("plan", "show", h[:12]).returncode == 0
    gate = cli("gate", str(plan))
    assert "verdict issued" in gate.stdout, gate.stdout + gate.stderr
    vid = re.search(r"verdict issued: (\S+)", gate.stdout).group(1)
    assert cli("export", "verdict", vid, "-o", str(tmp_path / "verdict.json")).returncode == 0
    assert cli("export", "runs", "--plan", h[:12], "-o", str(tmp_path / "runs.csv")).returncode == 0
    assert cli("export", "runs", "--plan", h[:12], "--format", "parquet", "-o", str(tmp_path / "runs.parquet")).returncode == 0
    assert cli("sql", "SELECT env_json FROM engine_launches").returncode == 0

    # the engines received the real values
    assert set((tmp_path / "seen-inline.txt").read_text().split()) == {inline}
    assert set((tmp_path / "seen-pass.txt").read_text().split()) == {passed}
    # ... and no table, export, engine log, artifact or console output holds either of them
    needles = [inline, passed]
    assert _db_hits(db, needles) == []
    assert _file_hits(tmp_path, needles, skip={plan, tmp_path / "seen-inline.txt", tmp_path / "seen-pass.txt"}) == []
    assert not [o for o in outputs if inline in o or passed in o]
    assert list((tmp_path / "artifacts" / "logs").glob("*.log"))  # the engine logs were searched

    # stored copies hold the names and a SHA-256 of each value
    digest = "sha256:" + hashlib.sha256(inline.encode()).hexdigest()
    con = duckdb.connect(str(db), read_only=True)
    stored = json.loads(con.execute("SELECT canonical_json FROM plans").fetchone()[0])
    launches = [json.loads(e) for (e,) in con.execute("SELECT env_json FROM engine_launches ORDER BY started_at").fetchall()]
    attempts = [json.loads(c)["env"] for (c,) in con.execute("SELECT config_json FROM attempts").fetchall()]
    con.close()
    assert stored["engines"][0]["env"] == {"OMNI_TEST_SECRET": digest,
                                           "OMNI_PLAIN": "sha256:" + hashlib.sha256(b"1").hexdigest()}
    assert stored["engines"][1]["env_passthrough"] == ["OMNI_PASS_SECRET"]
    # the plan hash is defined over the redacted form: the stored row verifies on its own
    assert hashlib.sha256(json.dumps(stored, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                          .encode()).hexdigest() == h == document_hash(doc)
    assert {"OMNI_TEST_SECRET": digest} .items() <= launches[0].items()
    assert {"OMNI_PASS_SECRET": "sha256:" + hashlib.sha256(passed.encode()).hexdigest()}.items() <= launches[1].items()
    assert all(set(a) <= {"OMNI_TEST_SECRET", "OMNI_PLAIN", "OMNI_PASS_SECRET"} for a in attempts)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["plan"]["canonical"]["engines"][0]["env"]["OMNI_TEST_SECRET"] == digest


def test_hash_covers_the_redacted_form(tmp_path):
    """A plan that holds a value and the same plan holding only its hash are one frozen plan."""
    plan, doc = _secret_plan(tmp_path, "v@lue")
    hashed = json.loads(json.dumps(doc))
    hashed["engines"][0]["env"]["OMNI_TEST_SECRET"] = "sha256:" + hashlib.sha256(b"v@lue").hexdigest()
    assert document_hash(doc) == document_hash(hashed)
    other = json.loads(json.dumps(doc))
    other["engines"][0]["env"]["OMNI_TEST_SECRET"] = "another value"
    assert document_hash(other) != document_hash(doc)


@pytest.mark.slow  # campaigns run as a user would
def test_missing_values_are_refused_before_any_launch(tmp_path):
    """No value for a passthrough variable, or a plan run by hash whose file (and value) is gone:
    one line naming the field, and no engine is started."""
    plan, _ = _secret_plan(tmp_path, "kept-in-the-file")
    db = tmp_path / "c.duckdb"
    env = {k: v for k, v in os.environ.items() if k != "OMNI_PASS_SECRET"}
    fr = campaign("plan", "freeze", str(plan), db=db, env=env)
    assert fr.returncode == 0, fr.stderr
    r = campaign("run", str(plan), db=db, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "engines[1].env_passthrough: OMNI_PASS_SECRET is not set in the console's environment" in r.stderr
    h = re.search(r"[0-9a-f]{64}", fr.stdout).group(0)
    edited = json.loads(plan.read_text())
    edited["engines"][0]["env"]["OMNI_TEST_SECRET"] = "changed"
    plan.write_text(json.dumps(edited))  # the file no longer holds the frozen value
    r = campaign("run", h[:12], db=db, env={**env, "OMNI_PASS_SECRET": "x"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "engines[0].env.OMNI_TEST_SECRET: the store holds only the value's SHA-256" in r.stderr
    assert "changed" not in r.stderr and "kept-in-the-file" not in r.stderr
    v = campaign("plan", "verify", str(plan), db=db, env={**env, "COLUMNS": "400"})  # the diff shows the changed hash, never a value
    assert v.returncode == 1 and "engines[0].env.OMNI_TEST_SECRET" in v.stdout
    assert "changed" not in v.stdout.replace("ALTERED", "") and "kept-in-the-file" not in v.stdout
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM engine_launches").fetchone()[0] == 0
    con.close()


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_env_passthrough_names_are_checked(tmp_path):
    plan, doc = _secret_plan(tmp_path, "x")
    doc["engines"][0]["env_passthrough"] = ["OMNI_TEST_SECRET"]
    write_json(plan, doc)
    r = campaign("plan", "freeze", str(plan), db=tmp_path / "c.duckdb")
    assert r.returncode == 2
    assert "engines[0].env_passthrough: OMNI_TEST_SECRET is also set in engines[0].env" in r.stderr
    doc["engines"][0]["env_passthrough"] = ["not a name"]
    write_json(plan, doc)
    r = campaign("plan", "freeze", str(plan), db=tmp_path / "c.duckdb")
    assert r.returncode == 2 and "engines[0].env_passthrough[0]" in r.stderr


def test_addendum_env_values_are_redacted_and_found_again(tmp_path, store):
    """An addendum that gives an engine a new env value stores its hash; the value is found by
    that hash in the addendum file, the parent's value in the parent's file."""
    from data.plan_freeze import freeze
    from data.plan_loading import engine_environment, plan_from_store, plan_secrets

    plan, doc = _secret_plan(tmp_path, "parent-value-123")
    parent = freeze(store, plan).hash
    engines = json.loads(json.dumps(doc["engines"]))
    engines[1]["env"] = {"NEW_TOKEN": "addendum-value-456"}
    add = write_json(tmp_path / "addendum.json", {"schema": "omni-campaign-addendum/1", "parent": parent,
                                                   "name": "new token", "reason": "rotate", "changes": {"engines": engines}})
    child = freeze(store, add, expected_parent=parent).hash
    stored = store.scalar("SELECT string_agg(canonical_json, '') FROM plans")
    assert "parent-value-123" not in stored and "addendum-value-456" not in stored
    effective = plan_from_store(store, child)
    env = engine_environment(effective, plan_secrets(store, effective), environ={"OMNI_PASS_SECRET": "p"})
    assert env["ref-baseline"]["OMNI_TEST_SECRET"] == "parent-value-123"
    assert env["ref-fast"] == {"NEW_TOKEN": "addendum-value-456", "OMNI_PASS_SECRET": "p"}


def test_row_frozen_before_redaction_still_loads_and_is_shown_redacted(tmp_path, store):
    """A store written by an earlier version holds a plan hashed over its env values: it still
    verifies and runs, and `plan show` / verdict exports show only the hashes."""
    from data.audit import canonical_json, sha256_text
    from data.plan_loading import plan_from_store, plan_secrets, stored_document
    from data.store import utcnow

    _, doc = _secret_plan(tmp_path, "legacy-value-789")
    legacy = sha256_text(canonical_json(doc))
    assert legacy != document_hash(doc)
    store.insert("plans", {"plan_hash": legacy, "kind": "plan", "name": doc["name"], "canonical_json": canonical_json(doc),
                           "frozen_at": utcnow()})
    plan = plan_from_store(store, legacy[:12])
    assert plan.hash == legacy and "legacy-value-789" not in json.dumps(plan.document())
    assert "legacy-value-789" not in json.dumps(stored_document(store, legacy))
    assert "legacy-value-789" in plan_secrets(store, plan).values()


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_a_secret_flag_with_a_value_on_a_command_line_is_refused(tmp_path, store):
    """argv is stored and exported as written, so `--api-key VALUE` or `--hf-token=VALUE` would put
    the value in the store: the plan file is refused, one line naming the field and never the value
    (docs/plans.md). The flag without a value (`--hf-token` alone: use the login token) is fine, and
    so is a plan frozen before this rule (read back from the store, it is not refused)."""
    from data.plan_loading import plan_from_store

    plan, doc = _secret_plan(tmp_path, "x")
    base_argv = list(doc["engines"][1]["argv"])
    for argv, field in ((base_argv + ["--api-key", "sk-live-7f3a"], f"engines[1].argv[{len(base_argv)}]"),
                        (base_argv + ["--hf-token=hf_abcdef"], f"engines[1].argv[{len(base_argv)}]")):
        doc["engines"][1]["argv"] = argv
        write_json(plan, doc)
        r = campaign("plan", "freeze", str(plan), db=tmp_path / "c.duckdb")
        assert r.returncode == 2, r.stdout + r.stderr
        line = r.stderr.strip().splitlines()[-1]
        assert field in line and "takes a secret" in line and "env_passthrough" in line, line
        assert "sk-live-7f3a" not in r.stderr and "hf_abcdef" not in r.stderr
        assert "Traceback" not in r.stderr
    addendum = {"schema": "omni-campaign-addendum/1", "parent": "0" * 12, "name": "key", "reason": "r",
                "changes": {"engines": [{**doc["engines"][0], "argv": ["vllm", "serve", "--api-key", "k-123456"]}]}}
    r = campaign("plan", "freeze", str(write_json(tmp_path / "add.json", addendum)), db=tmp_path / "c.duckdb")
    assert r.returncode == 2 and "changes.engines[0].argv[2]: --api-key takes a secret" in r.stderr, r.stderr
    doc["engines"][1]["argv"] = base_argv + ["--hf-token", "--port", "1"]  # no value: hf's login token
    write_json(plan, doc)
    assert campaign("plan", "freeze", str(plan), db=tmp_path / "c.duckdb").returncode == 0
    # a row frozen before the rule: what the store holds is read as it is
    doc["engines"][1]["argv"] = base_argv + ["--api-key", "old-key-9999"]
    old = json.loads(json.dumps(doc))
    h = document_hash(old)
    store.con.execute("INSERT INTO plans (plan_hash, kind, name, canonical_json, frozen_at, frozen_by) "
                      "VALUES (?, 'plan', ?, ?, now(), 'test')", [h, old["name"], json.dumps(old)])
    assert plan_from_store(store, h).hash == h
