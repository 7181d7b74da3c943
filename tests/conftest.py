"""Shared pytest fixtures (owned by the lead; helpers put their own helpers in tests/<area>_*.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from data.store import Store


@pytest.fixture
def store(tmp_path):
    """A fresh, migrated run store in a temporary DuckDB file."""
    s = Store(tmp_path / "campaign.duckdb")
    yield s
    s.close()


@pytest.fixture(scope="module")
def prompt(tmp_path_factory):
    """One voiced test prompt, the bench's own (test modules may override it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_timing_fidelity import prompt_wav

    return prompt_wav(tmp_path_factory.mktemp("p") / "prompt.wav")
