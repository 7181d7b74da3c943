"""Know what was measured (issue 27): engine source identity and patches on real git
repositories made here, a real installed distribution, checkpoint bytes hashed at freeze and at
every launch, and compared engines' sampling, with the reference engine as the launched process
and `campaign` as a user runs it."""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

import pytest

from console.recording import launch_engine, stop_engine
from data.hashing import sha256_bytes, sha256_file
from data.plan_model import plan_from_dict
from data.store import Store
from engine_adapters.lifecycle import EngineStartError
from plans_helpers import free_port, inproc, make_workload, plan_dict, write_json

pytestmark = pytest.mark.timeout(240)

GIT_ENV = {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "T",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV, **(env or {})}).stdout


def make_repo(path: Path) -> str:
    """A checkout with one commit; returns the commit."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "engine.py").write_text("print('engine')\n")
    (path / "weights.bin").write_bytes(bytes(range(256)))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "engine")
    return git(path, "rev-parse", "HEAD").strip()


def reference_argv(port: int, profile: str = "fast") -> list[str]:
    return [sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni", "--profile", profile,
            "--host", "127.0.0.1", "--port", str(port)]


def engine_spec(tmp_path: Path, **entry):
    """One engine entry of a validated plan, launching the reference engine."""
    port = free_port()
    doc = plan_dict(make_workload(tmp_path / "wl"), profiles=("fast",), ports=[port])
    doc["engines"][0].update(argv=reference_argv(port), **entry)
    return plan_from_dict(doc).engines[0]


def launch(store: Store, spec, tmp_path: Path):
    return launch_engine(store, spec, log_dir=tmp_path / "logs", plan_hash=None,
                         checkpoint_cache=tmp_path / "ck-cache.json")


def last_launch(store: Store) -> dict:
    return store.query("SELECT * FROM engine_launches ORDER BY started_at DESC LIMIT 1")[0]


def test_revision_mismatch_is_a_startup_failure_naming_both(tmp_path):
    commit = make_repo(tmp_path / "src")
    spec = engine_spec(tmp_path, revision="deadbeef", source={"git": str(tmp_path / "src")})
    with Store(tmp_path / "c.duckdb") as store:
        with pytest.raises(EngineStartError) as exc:
            launch(store, spec, tmp_path)
        row = last_launch(store)
    msg = str(exc.value)
    assert "deadbeef" in msg and commit in msg and "\n" not in msg
    assert row["status"] == "startup_failed" and row["failure_reason"] in msg
    assert (row["source_kind"], row["source_commit"], row["source_dirty"]) == ("git", commit, False)
    assert row["pid"] is None  # nothing was spawned


def test_clean_checkout_is_recorded_with_commit_and_tree(tmp_path):
    commit = make_repo(tmp_path / "src")
    spec = engine_spec(tmp_path, revision=commit[:10], source={"git": str(tmp_path / "src")})
    with Store(tmp_path / "c.duckdb") as store:
        eng = launch(store, spec, tmp_path)
        stop_engine(store, eng)
        row = last_launch(store)
    assert row["status"] == "stopped"
    assert row["source_commit"] == commit and row["source_tree"] == git(tmp_path / "src", "rev-parse", "HEAD^{tree}").strip()
    assert row["source_dirty"] is False and row["patch_sha256"] is None


def write_patch(repo: Path, out: Path) -> Path:
    """The checkout's diff as docs/engines.md tells a user to write it (untracked files included,
    through a scratch index)."""
    env = {"GIT_INDEX_FILE": str(out.with_suffix(".index"))}
    git(repo, "read-tree", "HEAD", env=env)
    git(repo, "add", "-A", env=env)
    out.write_bytes(subprocess.run(["git", "-C", str(repo), "diff", "--binary", "--cached", "HEAD"], check=True,
                                   capture_output=True, env={**os.environ, **GIT_ENV, **env}).stdout)
    return out


@pytest.mark.slow  # 2 s in a loaded `make check`
def test_dirty_checkout_is_refused_and_accepted_with_its_patch(tmp_path):
    repo = tmp_path / "src"
    commit = make_repo(repo)
    (repo / "engine.py").write_text("print('patched engine')\n")
    (repo / "weights.bin").write_bytes(bytes(range(255, -1, -1)))  # binary change
    src = {"git": str(repo)}
    with Store(tmp_path / "c.duckdb") as store:
        (repo / "new_kernel.py").write_text("x = 1\n")  # untracked: dirty too
        index_before = (repo / ".git" / "index").read_bytes()

        with pytest.raises(EngineStartError, match="uncommitted changes.*engine.py"):
            launch(store, engine_spec(tmp_path, revision=commit[:8], source=src), tmp_path)
        assert last_launch(store)["source_dirty"] is True

        # the tracked changes only (plain `git diff`): the untracked file is missing, refused
        tracked_only = tmp_path / "tracked.patch"
        tracked_only.write_bytes(subprocess.run(["git", "-C", str(repo), "diff", "--binary", "HEAD"],
                                                capture_output=True, check=True).stdout)
        assert b"engine.py" in tracked_only.read_bytes() and b"new_kernel.py" not in tracked_only.read_bytes()
        with pytest.raises(EngineStartError, match=f"patch {tracked_only} .*is not the checkout's diff"):
            launch(store, engine_spec(tmp_path, revision=commit[:8], source=src, patch=str(tracked_only)), tmp_path)

        patch = write_patch(repo, tmp_path / "engine.patch")
        assert b"new_kernel.py" in patch.read_bytes() and b"GIT binary patch" in patch.read_bytes()
        eng = launch(store, engine_spec(tmp_path, revision=commit[:8], source=src, patch=str(patch)), tmp_path)
        stop_engine(store, eng)
        row = last_launch(store)
        assert row["status"] == "stopped" and row["source_dirty"] is True
        assert row["patch_sha256"] == sha256_file(patch) and row["patch_path"] == str(patch.resolve())
        # the user's index is untouched (the diff used a scratch index)
        assert (repo / ".git" / "index").read_bytes() == index_before
        assert "?? new_kernel.py" in git(repo, "status", "--porcelain")


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_dist_source_reads_the_installed_version_with_the_engines_python(tmp_path):
    have = version("duckdb")
    with Store(tmp_path / "c.duckdb") as store:
        eng = launch(store, engine_spec(tmp_path, revision=have, source={"dist": "duckdb"}), tmp_path)
        stop_engine(store, eng)
        row = last_launch(store)
        assert (row["source_kind"], row["source_location"], row["source_version"]) == ("dist", "duckdb", have)
        assert row["source_python"] == sys.executable
        with pytest.raises(EngineStartError, match=f"revision '0.0.1' does not match duckdb installed for .*version {have}"):
            launch(store, engine_spec(tmp_path, revision="0.0.1", source={"dist": "duckdb"}), tmp_path)
        with pytest.raises(EngineStartError, match="no-such-dist-xyz: not installed for"):
            launch(store, engine_spec(tmp_path, source={"dist": "no-such-dist-xyz"}), tmp_path)


# -- through the CLI: freeze refusals, a run, the views ---------------------------------------

def cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)], capture_output=True, text=True)


def two_engine_plan(tmp_path: Path, **kw) -> dict:
    doc = plan_dict(make_workload(tmp_path / "wl", short=True), concurrencies=(1,), requests=2, repeats=1,
                    profiles=("fast", "fast"), **kw)
    for i, e in enumerate(doc["engines"]):
        e["name"] = ("ref-base", "ref-cand")[i]
        e["argv"] = reference_argv(e["port"])
    doc["quality"].update(baseline="ref-base", candidate="ref-cand")
    return doc


def test_compared_engines_on_different_checkpoints_are_refused_at_freeze(tmp_path, capsys):
    (tmp_path / "ckA.bin").write_bytes(b"A" * 1000)
    (tmp_path / "ckB.bin").write_bytes(b"B" * 1000)
    doc = two_engine_plan(tmp_path)
    doc["engines"][0]["checkpoint_paths"] = [str(tmp_path / "ckA.bin")]
    doc["engines"][1]["checkpoint_paths"] = [str(tmp_path / "ckB.bin")]
    db = tmp_path / "c.duckdb"
    r = inproc(capsys, "plan", "freeze", str(write_json(tmp_path / "plan.json", doc)), db=db)
    assert r.returncode == 2
    assert "'ref-base' and 'ref-cand' are compared (quality)" in r.stderr and "ckA.bin" in r.stderr and "ckB.bin" in r.stderr
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM plans") == 0
    # the same bytes under another name are the same checkpoint
    (tmp_path / "ckB.bin").write_bytes(b"A" * 1000)
    r = inproc(capsys, "plan", "freeze", str(tmp_path / "plan.json"), db=db)
    assert r.returncode == 0, r.stderr
    with Store(db) as s:
        frozen = json.loads(s.scalar("SELECT checkpoints_json FROM plans"))
    assert frozen["files"][str(tmp_path / "ckA.bin")] == {"size": 1000, "sha256": sha256_bytes(b"A" * 1000)}


def test_temperature_in_one_engines_extra_body_is_refused_at_freeze(tmp_path, capsys):
    doc = two_engine_plan(tmp_path)
    doc["engines"][1]["request"] = {"extra_body": {"temperature": 0.9}}
    r = inproc(capsys, "plan", "freeze", str(write_json(tmp_path / "plan.json", doc)), db=tmp_path / "c.duckdb")
    assert r.returncode == 2
    assert "engines[1] 'ref-cand': temperature = 0.9 (request.extra_body) but 0.0 for 'ref-base' (sampling)" in r.stderr
    # a bench preset's own sampling differs from the plan's too
    doc["engines"][1]["request"] = {"preset": "vllm-bench"}
    doc["sampling"]["temperature"] = 0.0
    r = inproc(capsys, "plan", "freeze", str(write_json(tmp_path / "plan.json", doc)), db=tmp_path / "c.duckdb")
    assert r.returncode == 2  # the bench body sends no seed, its own temperature and token limits
    assert "engines[1] 'ref-cand': seed = absent (request.preset 'vllm-bench') but 42 for 'ref-base' (sampling)" in r.stderr


@pytest.mark.slow  # a full campaign
def test_a_patched_candidate_runs_and_every_view_says_what_ran(tmp_path, capsys):
    """Same extra_body sampling for both arms: freeze and run; params_json has the effective value,
    `campaign runs` and the verdict document show identity, patch hash and the precision mark,
    and the evidence bundle carries the patch with its hash."""
    repo = tmp_path / "src"
    commit = make_repo(repo)
    (repo / "engine.py").write_text("print('patched')\n")
    patch = write_patch(repo, tmp_path / "cand.patch")
    (tmp_path / "ck.bin").write_bytes(b"weights" * 100)
    doc = two_engine_plan(tmp_path)
    doc["model"]["checkpoint_paths"] = [str(tmp_path / "ck.bin")]
    for e in doc["engines"]:
        e["request"] = {"extra_body": {"temperature": 0.9, "max_tokens": 64}}
    doc["engines"][1].update(source={"git": str(repo)}, revision=commit[:10], patch=str(patch), precision_change=True)
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    r = cli("run", str(plan), db=db)
    assert r.returncode == 0, r.stdout + r.stderr
    with Store(db) as s:
        params = [json.loads(p) for (p,) in s.con.execute("SELECT params_json FROM runs").fetchall()]
        launches = s.query("SELECT engine, source_commit, patch_sha256, precision_change, checkpoint_sha256_json "
                           "FROM engine_launches ORDER BY engine")
    assert len(params) == 2 and all(p["sampling"] == {"seed": 42, "temperature": 0.9, "max_tokens": 64} for p in params)
    assert launches[1]["source_commit"] == commit and launches[1]["patch_sha256"] == sha256_file(patch)
    assert [x["precision_change"] for x in launches] == [False, True]

    out = inproc(capsys, "runs", "list", "--format", "csv", db=db).stdout
    cand = next(line for line in out.splitlines() if ",ref-cand," in line)
    assert f"git {commit[:12]} + patch {sha256_file(patch)[:12]}" in cand and "CHANGED" in cand

    from data.plan_loading import plan_from_store
    from stats.verdict_doc import engines_section
    with Store(db) as s:
        engines = engines_section(s, plan_from_store(s, s.scalar("SELECT plan_hash FROM plans")))
    assert engines[1]["precision_change"] is True and engines[1]["identities"][0]["patch_sha256"] == sha256_file(patch)
    assert engines[0]["precision_change"] is False

    from console.evidence import export_bundle
    bundle = tmp_path / "bundle"
    with Store(db) as s:
        export_bundle(s, plan_from_store(s, s.scalar("SELECT plan_hash FROM plans")), bundle, html=False)
    index = json.loads((bundle / "patches" / "patches.json").read_text())
    assert [(x["engine"], x["commit"], x["sha256"]) for x in index] == [("ref-cand", commit, sha256_file(patch))]
    assert (bundle / index[0]["file"]).read_bytes() == patch.read_bytes()
    # the bundle rebuilds the candidate's code: a clone at the commit, the patch applied
    git(tmp_path, "clone", "-q", str(repo), "rebuilt")
    git(tmp_path / "rebuilt", "checkout", "-q", commit)
    git(tmp_path / "rebuilt", "apply", "--binary", str(bundle / index[0]["file"]))
    assert (tmp_path / "rebuilt" / "engine.py").read_text() == (repo / "engine.py").read_text()
    assert index[0]["rebuild"] == f"git checkout {commit} && git apply --binary {index[0]['file']}"
    assert f"{sha256_file(patch)}  patches/{sha256_file(patch)}.patch" in (bundle / "MANIFEST.sha256").read_text()
    v = subprocess.run([sys.executable, "-m", "console.cli", "evidence", "verify", str(bundle)], capture_output=True,
                       text=True)
    assert v.returncode == 0, v.stdout + v.stderr and "patches" in v.stdout
    # an outsider edits the bundled patch and regenerates the manifest: verify names the patch
    forged = tmp_path / "forged"
    shutil.copytree(bundle, forged)
    subprocess.run(["sed", "-i", "s/^+/+ /", index[0]["file"]], cwd=forged, check=True)
    names = sorted(str(p.relative_to(forged)) for p in forged.rglob("*") if p.is_file() and p.name != "MANIFEST.sha256")
    (forged / "MANIFEST.sha256").write_text(
        subprocess.run(["sha256sum", *names], cwd=forged, capture_output=True, text=True, check=True).stdout)
    v = subprocess.run([sys.executable, "-m", "console.cli", "evidence", "verify", str(forged)], capture_output=True,
                       text=True)
    assert v.returncode == 1 and "patches" in v.stdout + v.stderr and "is not the hash its name states" in v.stdout + v.stderr
    assert cli("audit", "verify", db=db).returncode == 0


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_a_checkpoint_changed_after_freeze_fails_the_next_launch(tmp_path, capsys):
    ck = tmp_path / "ck.bin"
    ck.write_bytes(b"weights" * 100)
    doc = two_engine_plan(tmp_path)
    doc["model"]["checkpoint_paths"] = [str(ck)]
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    frozen = sha256_file(ck)
    ck.write_bytes(b"WEIGHTS" * 100)  # same size
    r = cli("run", str(plan), db=db)
    assert r.returncode != 0
    with Store(db) as s:
        rows = s.query("SELECT engine, status, failure_reason FROM engine_launches ORDER BY engine")
        assert s.scalar("SELECT count(*) FROM runs") == 0
    assert {x["status"] for x in rows} == {"startup_failed"} and len(rows) == 2
    assert rows[0]["failure_reason"] == (f"checkpoint file {ck} changed since the plan was frozen: "
                                         f"sha256 {sha256_file(ck)} now, {frozen} at freeze")
    assert str(ck) in r.stdout + r.stderr


def test_source_entries_are_checked_with_one_line_each(tmp_path):
    from data.errors import CampaignError
    from data.plan_validation import validate_plan_dict
    from plans_helpers import minimal_plan_doc

    def problem(**entry) -> str:
        doc = minimal_plan_doc()
        doc["engines"][0].update(entry)
        with pytest.raises(CampaignError) as exc:
            validate_plan_dict(doc, "p.json")
        return str(exc.value)

    assert problem(source={"git": "a", "dist": "b"}) == \
        "p.json: engines[0].source: give exactly one of 'git', 'dist', found 'dist', 'git'"
    assert problem(source={}) == "p.json: engines[0].source: give exactly one of 'git', 'dist', found none"
    assert problem(patch="x.patch") == \
        'p.json: engines[0].patch: a patch applies to a git checkout; give source: {"git": DIR}'
    assert "engines[0].precision_change: 'yes' is not of type 'boolean'" in problem(precision_change="yes")


def test_a_console_scripts_python_is_the_one_its_shebang_names(tmp_path):
    from engine_adapters.source_identity import IdentityError, engine_python

    script = Path(sys.executable).parent / "pytest"  # a console script of this venv: `#!<venv python>`
    assert script.read_text().startswith("#!")
    spec = replace(engine_spec(tmp_path, source={"dist": "pytest"}), argv=(str(script), "--version"))
    assert Path(engine_python(spec)).resolve() == Path(sys.executable).resolve()
    assert engine_python(replace(spec, source={"dist": "pytest", "python": "/opt/py/bin/python3"})) == "/opt/py/bin/python3"
    binary = replace(spec, argv=("/bin/true",))
    with pytest.raises(IdentityError, match="/bin/true is neither a Python nor a script a Python runs; give source.python"):
        engine_python(binary)


def test_a_decision_rules_engines_are_compared_too(tmp_path, capsys):
    (tmp_path / "ckA.bin").write_bytes(b"A" * 10)
    (tmp_path / "ckB.bin").write_bytes(b"B" * 10)
    doc = two_engine_plan(tmp_path)
    doc["engines"].append({**doc["engines"][1], "name": "ref-peer", "port": free_port(),
                           "checkpoint_paths": [str(tmp_path / "ckB.bin")]})
    doc["model"]["checkpoint_paths"] = [str(tmp_path / "ckA.bin")]
    doc["decision_rules"] = [{"name": "faster", "kind": "throughput_exceeds", "candidate": "ref-cand", "reference": "ref-peer",
                              "concurrencies": [1]}]
    r = inproc(capsys, "plan", "freeze", str(write_json(tmp_path / "plan.json", doc)), db=tmp_path / "c.duckdb")
    assert r.returncode == 2 and "'ref-peer' and 'ref-cand' are compared (decision rule 'faster')" in r.stderr


@pytest.mark.slow  # a full campaign
def test_identity_and_checkpoints_are_under_the_audit_chain(tmp_path, capsys):
    """The new launch columns and the frozen checkpoint digests are covered by their events' row
    hashes: an edit of either is found by `audit verify`."""
    import duckdb

    repo = tmp_path / "src"
    commit = make_repo(repo)
    (tmp_path / "ck.bin").write_bytes(b"w" * 10)
    doc = two_engine_plan(tmp_path)
    doc["model"]["checkpoint_paths"] = [str(tmp_path / "ck.bin")]
    doc["engines"][1].update(source={"git": str(repo)}, revision="feedface")  # a startup failure is stored too
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    cli("run", str(plan), db=db)
    assert cli("audit", "verify", db=db).returncode == 0
    con = duckdb.connect(str(db))
    con.execute("UPDATE engine_launches SET source_commit = 'feedface' || source_commit WHERE source_commit = ?", [commit])
    con.close()
    r = cli("audit", "verify", db=db)
    assert r.returncode == 1 and "launch" in r.stdout
    con = duckdb.connect(str(db))
    con.execute("UPDATE engine_launches SET source_commit = ? WHERE source_commit LIKE 'feedface%'", [commit])
    con.execute("UPDATE plans SET checkpoints_json = replace(checkpoints_json, '\"size\":10', '\"size\":11')")
    con.close()
    r = cli("audit", "verify", db=db)
    assert r.returncode == 1 and "plan" in r.stdout
