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
