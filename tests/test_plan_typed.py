"""One typed Plan: every section the code reads is parsed once in data/plan_model.py; nothing else
reads the document (`Plan.raw`), the plan hash of the shipped templates is what it always was, and
what a plan leaves out reads the same as before the typing (the gate's defaults above all)."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest

from console.commands.plan import real_template, template
from console.demo import QUICK_CHANGES
from console.runner import plan_cells, plan_sampling
from data.errors import CampaignError
from data.plan_hashing import document_hash
from data.plan_model import DEFAULT_QUALITY_CONCURRENCIES, BootstrapSpec, Margins, plan_from_dict
from data.plan_validation import validate_plan_dict
from plans_helpers import minimal_plan
from stats.gates import GateConfig
from stats.quality.registry import DEFAULT_SCORERS, plan_scorers

ROOT = Path(__file__).resolve().parents[1]
MARGINS = {"wer_pp": 0.2, "sim": 0.5, "mos": 0.05}


def _edited(doc: dict, changes: dict) -> dict:
    """`doc` with dotted-path edits, as console/demo.py edits the demo plan."""
    doc = copy.deepcopy(doc)
    for dotted, value in changes.items():
        node = doc
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(leaf) if isinstance(node, list) else leaf] = value
    return doc


def _demo() -> dict:
    """The demo template with its one absolute path (the domain WER model's texts: the bundled sample,
    wherever this checkout is) written as the checkout-relative path, so the pinned hash holds on any
    machine."""
    doc = copy.deepcopy(template(True))
    paths = doc["quality"]["model_paths"]
    assert Path(paths["pocketsphinx-domain"]) == ROOT / "data" / "sample_workload"
    paths["pocketsphinx-domain"] = "data/sample_workload"
    return doc


def _with_env() -> dict:
    doc = _demo()
    doc["engines"][0]["env"] = {"HF_TOKEN": "secret-value-123"}
    doc["engines"][1]["env_passthrough"] = ["CUDA_VISIBLE_DEVICES"]
    return doc


# document_hash of each document computed by main's code before the plan was typed; the demo and
# real-engine templates since issue 27 gave them their validators (`plan init` is unchanged); the
# real-engine template since issue 32 (admission-limit flags in argv, the peer's guidance, the GPU placeholder);
# the demo template since issue 32 (WER by the workload-domain pocketsphinx model, its texts' path);
# every template since issue 38 (`selection: required`; the real engines' `source` placeholders)
SHIPPED = {
    "plan init --demo": (_demo, "28652dc10e5c08c14884ee353aede271056ae843048d0c0acaef2d415d1c63cc"),
    "plan init": (lambda: template(False), "5a28be2d672e271c4089dd8610dce2a7211252052c7df7d32f63d02cf0a4e035"),
    "plan init --engines": (lambda: real_template(["vllm-omni", "sglang-omni", "peer"]),
                            "95c7744db1fd5d663a3e15fcc78b2837e3d994be3bb3020fddb3881451487a9d"),
    "demo env values": (_with_env, "7d826d47363614d1ce793267e8e42d3eb1f1f4f7deea5f03e9f11cc330549f99"),
    "demo --quick": (lambda: _edited(_demo(), {"workload.pools_file": "pools.json",
                                                      **{f"engines.{i}.port": 9001 + i for i in range(4)},
                                                      **QUICK_CHANGES}),
                     "90a7284e01b36732e6b5ac212daabc3fc44c6c2a11353520b370be9352fcd3f6"),
}


@pytest.mark.parametrize("name", list(SHIPPED))
def test_plan_hash_of_shipped_plans_is_unchanged(name, tmp_path):
    build, expected = SHIPPED[name]
    doc = build()
    assert document_hash(doc) == expected
    plan = plan_from_dict(doc, hash=document_hash(doc))
    assert document_hash(plan.document()) == expected  # the document kept with the plan hashes the same


def _attr_reads(path: Path) -> list[str]:
    """Where a module reads `.raw` (or getattr(x, "raw")): only data/plan_model.py may read the document."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "raw":
            hits.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "raw"):
            hits.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return hits


def test_no_module_outside_the_plan_model_reads_the_plan_document():
    files = [p for d in ("console", "stats", "engine_adapters", "data", "bench", "scripts") for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 50
    hits = [h for p in files if p != ROOT / "data" / "plan_model.py" for h in _attr_reads(p)]
    assert not hits, f"read the typed Plan, not .raw: {', '.join(hits)}"


def test_one_engine_spec():
    defined = [f"{p.relative_to(ROOT)}" for d in ("console", "stats", "engine_adapters", "data")
               for p in (ROOT / d).rglob("*.py")
               if any(isinstance(n, ast.ClassDef) and n.name == "EngineSpec" for n in ast.walk(ast.parse(p.read_text())))]
    assert defined == ["data/plan_model.py"]


def test_gate_defaults_for_a_plan_that_omits_them():
    cfg = GateConfig.from_plan(minimal_plan(quality={"margins": MARGINS}))
    assert cfg.margins == {"wer": 0.2, "sim": 0.5, "mos": 0.05}
    assert (cfg.draws, cfg.seed, cfg.method, cfg.confidence) == (20000, 20261022, "percentile", 0.95)
    assert cfg.concurrencies == DEFAULT_QUALITY_CONCURRENCIES  # the holdout cells' (it was None: any in the table)
    assert cfg.repeats == (0,)  # the sweep's measured repeats
    assert GateConfig.from_plan(minimal_plan(quality={"margins": MARGINS, "concurrencies": []})).concurrencies is None
    # a margin is never assumed: none given, or one missing, is refused
    for quality in ({}, {"baseline": "e"}, {"margins": {}}, {"margins": {"wer_pp": 0.2, "sim": 0.5}}):
        with pytest.raises(CampaignError, match="margin for (wer|mos): missing or not a number"):
            GateConfig.from_plan(minimal_plan(quality=quality))
    with pytest.raises(CampaignError, match="margin for wer: missing"):
        GateConfig.from_plan(minimal_plan())


def test_what_a_plan_leaves_out():
    engines = [{"name": n, "adapter": "reference", "dialect": "vllm-omni", "port": p} for n, p in (("a", 1), ("b", 2))]
    plan = minimal_plan(engines=engines, quality={"baseline": "a", "candidate": "b"})
    validate_plan_dict(plan.document(), "minimal")
    q = plan.quality
    # the holdout cells run at the default concurrencies on the default pool ...
    assert q.concurrencies == DEFAULT_QUALITY_CONCURRENCIES and q.pool == "holdout"
    assert sorted({(c.concurrency, c.pool) for c in plan_cells(plan, "holdout")}) == [(1, "holdout"), (16, "holdout"),
                                                                                       (32, "holdout")]
    # ... and the scores and the gate cover exactly those cells (they used to cover "what the plan
    # names": no concurrency expected, runs of any pool; see the test below)
    assert q.scored_concurrencies == DEFAULT_QUALITY_CONCURRENCIES and q.scored_pool == "holdout"
    assert q.margins == Margins() and plan.bootstrap == BootstrapSpec()
    assert plan_scorers(plan) == {"wer": DEFAULT_SCORERS["wer"], "sim": DEFAULT_SCORERS["sim"], "mos": DEFAULT_SCORERS["mos"]}
    assert plan_sampling(plan) == {}  # nothing sent: the engine's defaults apply
    assert plan.workload.pool == "tuning" and plan.sweep.restart == "per_repeat" and plan.metrics.throughput_scale == 25
    named = minimal_plan(engines=engines, quality={"baseline": "a", "candidate": "b", "pool": None, "concurrencies": [16]})
    assert named.quality.scored_pool is None and named.quality.pool is None and named.quality.scored_concurrencies == (16,)


def test_a_plan_that_leaves_out_the_quality_pool_scores_only_its_holdout_cells(tmp_path):
    """Defect fix: with `quality.pool` and `quality.concurrencies` left out, the holdout cells ran
    at 1/16/32 on `holdout`, but scoring expected no quality cells and read runs of any pool, so
    the gate could be fed tuning-pool sweep runs (outputs the team tuned on) instead of the
    reserved holdout."""
    from data.store import Store
    from plans_helpers import insert_run
    from stats.quality.scoring import expected_outputs

    engines = [{"name": n, "adapter": "reference", "dialect": "vllm-omni", "port": p} for n, p in (("a", 1), ("b", 2))]
    plan = minimal_plan(engines=engines, quality={"baseline": "a", "candidate": "b", "margins": MARGINS})
    with Store(tmp_path / "s.duckdb") as store:
        for engine in ("a", "b"):
            for pool in ("tuning", "holdout"):
                run_id = f"{engine}-{pool}"
                insert_run(store, run_id, plan_hash=plan.hash, engine=engine, concurrency=16, utt_ids=[f"{pool}-1"])
                store.con.execute("UPDATE runs SET pool = ? WHERE run_id = ?", [pool, run_id])
        runs = {e.run_id for e in expected_outputs(store, plan) if e.run_id}
    assert runs == {"a-holdout", "b-holdout"}
    assert GateConfig.from_plan(plan).concurrencies == DEFAULT_QUALITY_CONCURRENCIES


def _same(typed, value) -> bool:
    return list(typed) == value if isinstance(value, list) else typed == value


def test_every_field_of_the_template_reads_typed():
    """Each field the demo template writes is the typed attribute's value (lists as tuples)."""
    doc = template(True)
    plan = plan_from_dict(doc)
    for key in ("model", "gpu", "workload", "sweep", "metrics", "bootstrap"):
        for name, value in doc[key].items():
            if not name.startswith("_"):
                assert _same(getattr(getattr(plan, key), name), value), f"{key}.{name}"
    for entry, engine in zip(doc["engines"], plan.engines, strict=True):
        for name, value in entry.items():
            assert _same(getattr(engine, name), value), f"engines.{name}"
        assert engine.model == doc["model"]["id"]
    for name, value in doc["quality"].items():
        if name.startswith("_"):
            continue
        typed = getattr(plan.quality, name)
        assert (typed == Margins(**value)) if name == "margins" else _same(typed, value), f"quality.{name}"
    assert plan.quality.named == frozenset(k for k in doc["quality"] if not k.startswith("_"))
    assert list(plan.sampling.fields.items()) == list(doc["sampling"].items())  # as written, in order
    assert (plan.sampling.seed, plan.sampling.temperature, plan.sampling.max_tokens) == (42, 0.0, None)
    for key, items in (("decision_rules", plan.decision_rules), ("validators", plan.validators)):
        for entry, typed in zip(doc[key], items, strict=True):
            assert all(_same(getattr(typed, k), v) for k, v in entry.items()), key
    view = plan.for_candidate("ref-lossy")
    assert view.quality.candidates == ("ref-lossy",) and view.quality.candidate == "ref-lossy"
    assert view.quality.scored_pool == "holdout" and view.quality.scored_concurrencies == (1, 16, 32)
