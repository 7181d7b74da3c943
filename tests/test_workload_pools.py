"""`campaign workload pools`: pools by index slices over meta.lst (seeded permutation, within a
pool), written to their own file; the reuse audit against a real store; a plan's
`workload.pools_file` is used and hashed by the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from console.cli import main
from data.errors import CampaignError
from data.manifest import build_manifest
from data.plan_freeze import freeze
from data.plan_loading import load_plan
from data.store import Store
from plans_helpers import insert_run, make_workload, plan_dict, write_json

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_workload"


def _meta_ids() -> list[str]:
    return [line.split("|")[0] for line in (SAMPLE / "en" / "meta.lst").read_text().splitlines() if line.strip()]


def test_slice_writes_meta_lines_33_to_96(tmp_path, capsys):
    out = tmp_path / "p.json"
    before = sorted(p.name for p in SAMPLE.rglob("*"))
    assert main(["workload", "pools", str(SAMPLE), "--define", "a=32:96", "-o", str(out)]) == 0
    pools = json.loads(out.read_text())
    assert list(pools) == ["a"] and pools["a"] == _meta_ids()[32:96] and len(pools["a"]) == 64
    assert pools["a"][0].endswith("-0033") and pools["a"][-1].endswith("-0096")
    assert sorted(p.name for p in SAMPLE.rglob("*")) == before  # nothing written into the dataset folder
    assert "64" in capsys.readouterr().out


def test_shuffle_and_from_pool(tmp_path):
    out = tmp_path / "p.json"
    assert main(["workload", "pools", str(SAMPLE), "--define", "h=0:20", "--define", "t=20:40",
                 "--shuffle", "7", "-o", str(out)]) == 0
    pools = json.loads(out.read_text())
    ids = _meta_ids()
    perm = [ids[i] for i in np.random.default_rng(7).permutation(len(ids))]
    assert pools == {"h": perm[:20], "t": perm[20:40]}
    tuning = json.loads((SAMPLE / "pools.json").read_text())["tuning"]
    assert main(["workload", "pools", str(SAMPLE), "--from", "tuning", "--define", "x=5:10", "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == {"x": tuning[5:10]}


@pytest.mark.parametrize("args, needle", [
    (["--define", "a=10"], "NAME=START:END"),
    (["--define", "a=x:9"], "integers"),
    (["--define", "a=9:3"], "START < END"),
    (["--define", "a=0:999"], "only 128 utterances"),
    (["--define", "a=0:2", "--define", "a=2:4"], "defined twice"),
    (["--from", "nope", "--define", "a=0:2"], "no such pool"),
])
def test_bad_definitions_are_one_line_errors(tmp_path, capsys, args, needle):
    out = tmp_path / "p.json"
    assert main(["workload", "pools", str(SAMPLE), *args, "-o", str(out)]) != 0
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and not out.exists()


def test_db_lists_reused_ids(tmp_path, capsys):
    ids = _meta_ids()
    db = tmp_path / "campaign.duckdb"
    with Store(db) as store:
        insert_run(store, "old-run", utt_ids=[ids[40], ids[41], ids[200 % len(ids)]])
    out = tmp_path / "p.json"
    assert main(["workload", "pools", str(SAMPLE), "--define", "holdout=32:96", "--define", "tuning=0:32",
                 "-o", str(out), "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert f"pool 'holdout': 3 id(s) already in stored requests: {ids[40]}, {ids[41]}, {ids[72]}" in " ".join(text.split())
    assert "'tuning'" not in text.split("reused")[-1]  # the tuning slice reuses nothing
    assert main(["workload", "pools", str(SAMPLE), "--define", "a=0:2", "-o", str(out),
                 "--db", str(tmp_path / "none.duckdb")]) != 0


def test_plan_pools_file_is_used_and_hashed(tmp_path, store):
    root = make_workload(tmp_path / "wl", n=12, n_holdout=4)
    pools_file = tmp_path / "my-pools.json"
    assert main(["workload", "pools", str(root), "--define", "tuning=0:6", "--define", "holdout=6:12",
                 "-o", str(pools_file)]) == 0
    doc = plan_dict(root)
    doc["workload"]["pools_file"] = str(pools_file)
    plan_path = write_json(tmp_path / "plan.json", doc)
    plan = load_plan(plan_path)
    m = build_manifest(plan)
    assert len(m.pools["tuning"]) == 6 and len(m.pools["holdout"]) == 6  # the file's pools, not pools.json's 8/4
    assert m.doc["pools_file_sha256"] and m.hash != build_manifest(load_plan(write_json(
        tmp_path / "plain.json", plan_dict(root)))).hash
    res = freeze(store, plan_path)
    stored = json.loads(store.scalar("SELECT manifest_json FROM workload_manifests WHERE manifest_hash = ?",
                                     [res.manifest_hash]))
    assert stored["pools_file_sha256"] == m.doc["pools_file_sha256"]
    pools_file.write_text(json.dumps({"tuning": json.loads(pools_file.read_text())["tuning"][:5],
                                      "holdout": json.loads(pools_file.read_text())["holdout"]}))
    assert build_manifest(plan).hash != res.manifest_hash  # an edited pools file reads as a changed workload
    pools_file.write_text("{not json")
    with pytest.raises(CampaignError, match="my-pools.json: invalid JSON"):
        build_manifest(plan)
