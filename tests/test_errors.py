"""data/errors.py: the one helper that turns an exception into the one line a user sees."""

from __future__ import annotations

import json

import duckdb
import pytest

from data.errors import first_line, one_line


def _raised(fn) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def test_first_line_of_real_errors():
    exc = _raised(lambda: json.loads("{not json"))
    assert first_line(exc) == str(exc) and "\n" not in first_line(exc)
    multi = _raised(lambda: duckdb.connect(":memory:").execute("SELECT * FROM missing_table"))
    assert "\n" in str(multi).strip()  # DuckDB's catalog errors carry a hint on further lines
    assert first_line(multi) == str(multi).strip().splitlines()[0]


def test_first_line_limit_and_defaults():
    assert first_line(ValueError("  padded  \n second")) == "padded"
    assert first_line(ValueError("x" * 300), 160) == "x" * 160
    assert first_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert first_line(RuntimeError("   "), default="non-tensor objects") == "non-tensor objects"


def test_one_line_names_the_type():
    assert one_line(OSError("disk full\nmore")) == "OSError: disk full"
    assert one_line(ValueError()) == "ValueError"
    assert one_line(ValueError("abcdef"), 3) == "ValueError: abc"


def test_a_missing_extra_is_named_in_one_line():
    """data/extras.py: the package an ImportError names (directly, or as the cause of another
    error) maps to the extra that installs it; other import errors are not an extra's."""
    from data.extras import MissingExtra, extra_for, needs_extra

    try:
        import torch_not_installed_here  # noqa: F401
    except ImportError as exc:
        assert extra_for(exc) is None and needs_extra("campaign score", exc) is None
    missing = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert extra_for(missing) == "quality"
    try:
        try:
            raise ModuleNotFoundError("No module named 'ray'", name="ray.util")
        except ImportError as inner:
            raise RuntimeError("scorer failed") from inner
    except RuntimeError as outer:
        err = needs_extra("--cluster", outer)
    assert isinstance(err, MissingExtra) and str(err) == (
        "--cluster: needs the 'cluster' extra (pip install 'omni-campaign-console[cluster]'): No module named 'ray'")
