"""Shared pytest fixtures (owned by the lead; helpers put their own helpers in tests/<area>_*.py)."""

from __future__ import annotations

import pytest

from data.store import Store


@pytest.fixture
def store(tmp_path):
    """A fresh, migrated run store in a temporary DuckDB file."""
    s = Store(tmp_path / "campaign.duckdb")
    yield s
    s.close()
