"""One home per verdict kind (console/verdicts/, docs/architecture.md): the registry holds exactly
the kinds a verdict document may name, a name no module declares is refused in one line, and the
evidence verifier and the demo's summary pick a kind only through the registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from console.evidence_steps import EvidenceMismatch
from console.verdicts import KINDS, kind_of

ROOT = Path(__file__).resolve().parents[1]


def test_the_registry_holds_the_kinds_the_verdict_schema_names():
    schema = json.loads((ROOT / "docs" / "verdict.schema.json").read_text())
    assert sorted(KINDS) == sorted(schema["properties"]["kind"]["enum"])
    assert all(k.name == name for name, k in KINDS.items())


def test_an_unknown_kind_is_refused_in_one_line():
    with pytest.raises(EvidenceMismatch, match=r"^verdicts/x.json: kind 'speed' is not a verdict kind \(quality, "):
        kind_of("speed", "verdicts/x.json")


def test_no_kind_dispatch_outside_the_registry():
    import inspect

    from console import demo, evidence

    dispatch = re.compile(r"""kind["')\]]*\s*==\s*["'](quality|throughput|equivalence|acceptance)["']""")
    assert not dispatch.search(inspect.getsource(evidence))
    assert not dispatch.search(inspect.getsource(demo.verdict_lines))


def test_only_quality_verdicts_carry_an_input_table():
    assert KINDS["quality"].bundle_files("v1") == ("v1.scores.parquet",)
    assert [k.bundle_files("v1") for n, k in KINDS.items() if n != "quality"] == [(), (), ()]
