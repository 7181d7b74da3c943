"""One table of quality metrics and one name for MOS (stats/quality/metrics.py, docs/quality.md):
`mos` in score tables, checks, margins and flags; what older consoles wrote (`utmos` column,
`--utmos-margin`, documents with utmos margins, arrays and checks) still reads, to the same
input hash and the same bounds."""

from __future__ import annotations

import json

import jsonschema
import pytest
from test_verdicts import HAND

from console.cli import main
from data.store import Store
from stats.gates import LABELS, METRICS, UNITS
from stats.quality.base import METRICS as SCORED_METRICS
from stats.quality.metrics import QUALITY_METRICS, check_labels
from stats.results.replicates import document_replicates
from stats.verdict_doc import load_schema

ARGS = ["--wer-margin", "0.2", "--sim-margin", "0.5", "--draws", "2000", "--seed", "20261022", "--concurrencies", "1",
        "--issue"]


def test_one_table_names_every_quality_metric():
    assert METRICS == SCORED_METRICS == ("wer", "sim", "mos")
    assert UNITS == {"wer": "pp", "sim": "x100", "mos": "MOS"}
    assert LABELS == {q.name: q.label for q in QUALITY_METRICS}
    assert [q.margin_key for q in QUALITY_METRICS] == ["wer_pp", "sim", "mos"]  # the plan's quality.margins keys
    assert check_labels({"mos": "DNSMOS OVRL (P.835)"})["mos"] == "MOS drop (DNSMOS OVRL (P.835))"
    assert check_labels({"utmos": "UTMOS22 strong"})["mos"] == "MOS drop (UTMOS22 strong)"  # an older frame's key
    # every check names its scorer: a domain model's WER is never shown as a general recogniser's
    labels = check_labels({"wer": "WER (pocketsphinx + workload-domain LM: not a general ASR)",
                           "sim": "SIM x100 (Resemblyzer GE2E)"})
    assert labels["wer"] == "WER degradation (pocketsphinx + workload-domain LM: not a general ASR)"
    assert labels["sim"] == "SIM drop (Resemblyzer GE2E)"
    assert check_labels()["wer"] == "WER degradation"


def _issue(tmp_path, name: str, table: str, mos_flag: str) -> dict:
    csv = tmp_path / f"{name}.csv"
    csv.write_text(table)
    db = tmp_path / f"{name}.duckdb"
    assert main(["gate", "--scores", str(csv), mos_flag, "0.05", *ARGS, "--db", str(db)]) == 1  # WER FAIL
    with Store(db, read_only=True) as s:
        return json.loads(s.scalar("SELECT document_json FROM verdicts"))


def test_an_older_table_and_flag_gate_the_same(tmp_path):
    new = _issue(tmp_path, "new", HAND, "--mos-margin")
    old = _issue(tmp_path, "old", HAND.replace(",sim,mos\n", ",sim,utmos\n"), "--utmos-margin")
    assert HAND.startswith("arm,concurrency,repeat,utt_id,wer_errors,wer_words,sim,mos\n")
    assert old["inputs"]["sha256"] == new["inputs"]["sha256"]  # the hash is over values: the column's name is not in it
    assert old["checks"] == new["checks"]
    assert [c["metric"] for c in new["checks"]] == ["wer", "sim", "mos"] and new["margins"]["mos"] == 0.05
    assert set(new["cells"][0]["arrays"]) >= {"mos_base", "mos_cand"} and "utmos_base" not in new["cells"][0]["arrays"]


def test_documents_issued_before_the_rename_still_validate_and_redraw(tmp_path):
    doc = _issue(tmp_path, "new", HAND, "--mos-margin")
    jsonschema.validate(doc, load_schema())
    old = json.loads(json.dumps(doc))  # as an older console wrote it
    old["margins"] = {"utmos" if k == "mos" else k: v for k, v in old["margins"].items()}
    for cell in old["cells"]:
        cell["arrays"] = {k.replace("mos_", "utmos_") if k.startswith("mos_") else k: v for k, v in cell["arrays"].items()}
        cell["full_coverage"] = {"utmos" if k == "mos" else k: v for k, v in cell["full_coverage"].items()}
    for c in old["checks"]:
        c["metric"] = "utmos" if c["metric"] == "mos" else c["metric"]
    assert "utmos_base" in old["cells"][0]["arrays"] and old["margins"]["utmos"] == 0.05
    jsonschema.validate(old, load_schema())
    got = {(r.concurrency, r.metric): (r.point, r.bound) for r in document_replicates(old)}
    want = {(r.concurrency, r.metric): (r.point, r.bound) for r in document_replicates(doc)}
    assert got == want and (1, "mos") in want
    bad = json.loads(json.dumps(doc))
    del bad["margins"]["mos"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, load_schema())
