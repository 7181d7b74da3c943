"""Tables in pipes and narrow terminals (console/output.py): the real CLI as a subprocess, with its
stdout a pipe (natural width, one line per row, whatever COLUMNS says) and a pseudo-terminal of 80
columns (no line wider, no word of any cell broken, a table too wide turned on its side); every
command that prints a table takes `--format csv|json`; `campaign sql` keeps DuckDB's hint."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from results_store import build_campaign

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
REASON = "profiled: stands for a run measured under a profiler attached to the engine (window W1)"
EXCLUSIONS = ("SELECT x.run_id, r.engine, r.concurrency, x.reason, a.seq AS audit_seq FROM exclusions x JOIN runs r "
              "USING (run_id) JOIN audit_events a ON a.seq = x.audit_seq ORDER BY ALL")
RUNS = "SELECT run_id, engine, concurrency, kind, pool, status, cell_key, started_at FROM runs ORDER BY run_id"


def campaign(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "console.cli", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=300, env={**os.environ, **(env or {})})
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def in_terminal(*args: str, columns: int = 80) -> str:
    """The command's output on a pseudo-terminal `columns` wide (escape codes removed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "24", "TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", *args], cwd=ROOT, env=env, stdin=slave,
                            stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")
    return ANSI.sub("", b"".join(chunks).decode().replace("\r\n", "\n"))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db, plan = build_campaign(tmp_path_factory.mktemp("tables"))
    for run in ("baseline-c4-r0", "fast-c2-r1"):
        campaign("runs", "exclude", run, "--reason", REASON, "--db", str(db))
    return db, plan


def test_a_pipe_gets_one_line_per_row_at_natural_width_whatever_columns_says(store):
    db, _ = store
    rows = json.loads(campaign("sql", RUNS, "--format", "json", "--db", str(db)).stdout)
    out = campaign("sql", RUNS, "--db", str(db), env={"COLUMNS": "80"}).stdout
    lines = out.rstrip("\n").split("\n")
    assert len(lines) == len(rows) + 4  # top border, header, rule, the rows, bottom border
    assert len({len(line) for line in lines}) == 1 and len(lines[0]) > 80
    for r, line in zip(rows, lines[3:]):
        assert f" {r['run_id']} " in line and f" {r['engine']} " in line  # `ref-baseli / ne` before
    out = campaign("sql", EXCLUSIONS, "--db", str(db), env={"COLUMNS": "80"}).stdout
    assert sum(REASON in line for line in out.split("\n")) == 2  # each reason whole, on its row's line


def test_at_80_columns_no_line_is_wider_and_no_word_is_broken(store):
    db, _ = store
    for query in (EXCLUSIONS, RUNS):
        out = in_terminal("sql", query, "--db", str(db))
        lines = out.rstrip("\n").split("\n")
        assert max(len(line) for line in lines) <= 80, out
        rows = json.loads(campaign("sql", query, "--format", "json", "--db", str(db)).stdout)
        words = {w for r in rows for v in r.values() for w in str(v).split()}
        text = "\n".join(lines)
        broken = sorted(w for w in words if not re.search(rf"(?<![^\s│┃]){re.escape(w)}(?![^\s│┃])", text))
        assert not broken, f"words broken across lines: {broken[:5]}\n{out}"
    # the 2-row exclusions query is short (it took 59 lines wrapped at 80 columns)
    assert len(in_terminal("sql", EXCLUSIONS, "--db", str(db)).strip().split("\n")) <= 16


def test_sql_keeps_duckdbs_hint(store):
    db, _ = store
    r = campaign("sql", "SELECT enigne FROM runs", "--db", str(db), check=False)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and 'Candidate bindings: "engine"' in r.stderr, r.stderr
    r = campaign("sql", "SELECT * FROM rnus", "--db", str(db), check=False)
    assert 'Did you mean "runs"' in r.stderr and r.stderr.count("\n") == 1, r.stderr


def _parsed(fmt: str, text: str) -> list[dict]:
    return json.loads(text) if fmt == "json" else list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_every_table_command_takes_format(store, fmt, tmp_path):
    """db info, workload show / pools, controls and gate: stdout is the table alone, parseable."""
    db, plan = store
    got = _parsed(fmt, campaign("db", "info", "--format", fmt, "--db", str(db)).stdout)
    assert {r["table"] for r in got} >= {"runs", "requests"}
    got = _parsed(fmt, campaign("workload", "show", "--format", fmt).stdout)
    assert got[0]["item"] == "utterances" and int(got[0]["count"]) > 0
    wl = Path(json.loads(plan.read_text())["workload"]["root"])
    got = _parsed(fmt, campaign("workload", "pools", str(wl), "--define", "a=0:4", "--define", "b=4:8",
                                "-o", str(tmp_path / "pools.json"), "--format", fmt).stdout)
    assert [r["pool"] for r in got] == ["a", "b"]
    got = _parsed(fmt, campaign("controls", "--draws", "200", "--format", fmt).stdout)
    assert got and all(r["ok"] in ("yes", "NO") for r in got)
    r = campaign("gate", str(plan), "--dry-run", "--format", fmt, "--db", str(db), check=False)
    assert r.returncode in (0, 1, 3), r.stderr
    got = _parsed(fmt, r.stdout)
    kinds = {row["kind"] for row in got}
    assert kinds == {"quality", "throughput"} and {"verdict", "status", "bound", "margin"} <= set(got[0])
    assert "dry run: nothing issued" in r.stderr
