"""The one cell loop (engine_adapters/cell_loop.py) that a local run and every cluster node run:
the restart rule, startup failures, crashed launches and interrupts, seen through a Launcher that
records what it is asked to do (the seam where the store or the node's messages plug in; the
real launches are covered by tests/test_runner.py and tests/test_cluster.py)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from data.plan_model import EngineSpec
from engine_adapters.cell_loop import NOT_STARTED, SKIPPED, EngineManager, Launch, fresh_launch, run_cells

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Cell:
    engine: str
    concurrency: int


class Process:
    def __init__(self, n: int):
        self.launch_id = f"L{n}"
        self.dead = False

    def exit_cause(self) -> str | None:
        return "engine exited: killed by SIGKILL" if self.dead else None


class Launches:
    """Starts 'processes' in memory and writes down every start and stop, in order."""

    def __init__(self, refuse: set[str] = frozenset()):
        self.refuse, self.log, self.n = refuse, [], 0

    def start(self, engine: EngineSpec):
        if engine.name in self.refuse:
            self.log.append(("failed", engine.name))
            return None, [("launch_failed", engine.name)]
        self.n += 1
        self.log.append(("start", engine.name))
        return Process(self.n), [("launch", engine.name)]

    def stop(self, launch: Launch, outcome: str):
        self.log.append(("stop", launch.engine.name, outcome, tuple(launch.run_ids)))
        return [("launch_ended", launch.engine.name)]


def engine(name: str) -> EngineSpec:
    return EngineSpec(name=name, adapter="reference", dialect="vllm-omni")


def loop(cells, restart, launches, crash=(), interrupt_at=None):
    done: list = []

    def drive(cell, launch):
        if (cell.engine, cell.concurrency) == interrupt_at:
            raise KeyboardInterrupt
        launch.run_ids.append(f"{cell.engine}-c{cell.concurrency}-{len(done)}")
        done.append(cell)
        if (cell.engine, cell.concurrency) in crash:
            launch.process.dead = True
        return [("ran", cell.engine, cell.concurrency)]

    msgs = list(run_cells(cells, restart, EngineManager(launches), engine_of=lambda c: engine(c.engine),
                          drive=drive, skip=lambda c, why: [("skipped", c.engine, why)]))
    return msgs, done


AB = [Cell("a", 1), Cell("b", 1), Cell("a", 2), Cell("b", 2)]


def test_the_restart_rule():
    assert fresh_launch("per_repeat", "a", {"a"}, {"a": 1}, 1)
    assert not fresh_launch("per_cell", "a", {"a"}, {"a": 1}, 1)
    assert fresh_launch("per_cell", "a", {"a"}, {"a": 1}, 2)
    assert not fresh_launch("never", "a", {"a"}, {"a": 1}, 2)
    assert fresh_launch("never", "a", {"b"}, {}, 1)


def test_per_cell_runs_one_engine_at_a_time_and_stops_everything_at_the_end():
    launches = Launches()
    msgs, done = loop(AB, "per_cell", launches)
    assert done == AB
    assert launches.log == [("start", "a"), ("stop", "a", "measured", ("a-c1-0",)), ("start", "b"),
                            ("stop", "b", "measured", ("b-c1-1",)), ("start", "a"),
                            ("stop", "a", "measured", ("a-c2-2",)), ("start", "b"),
                            ("stop", "b", "measured", ("b-c2-3",))]
    assert msgs[:3] == [("launch", "a"), ("ran", "a", 1), ("launch_ended", "a")]


def test_never_keeps_every_engine_up_for_the_sweep():
    launches = Launches()
    loop(AB, "never", launches)
    assert launches.log == [("start", "a"), ("start", "b"), ("stop", "a", "measured", ("a-c1-0", "a-c2-2")),
                            ("stop", "b", "measured", ("b-c1-1", "b-c2-3"))]


def test_an_engine_that_does_not_start_fails_its_cell_and_skips_its_later_cells():
    launches = Launches(refuse={"b"})
    msgs, done = loop(AB, "per_cell", launches)
    assert done == [Cell("a", 1), Cell("a", 2)]
    assert ("skipped", "b", NOT_STARTED) in msgs and ("skipped", "b", SKIPPED) in msgs
    assert [m for m in msgs if m[0] == "skipped"] == [("skipped", "b", NOT_STARTED), ("skipped", "b", SKIPPED)]
    assert launches.log.count(("failed", "b")) == 1  # never launched again


def test_a_crashed_launch_is_stopped_and_its_next_cell_gets_a_fresh_one():
    launches = Launches()
    cells = [Cell("a", 1), Cell("a", 1), Cell("a", 1)]
    loop(cells, "never", launches, crash={("a", 1)})
    assert launches.log == [entry for i in range(3) for entry in (("start", "a"), ("stop", "a", "measured", (f"a-c1-{i}",)))]


def test_an_interrupt_stops_every_engine_as_interrupted_and_goes_on():
    launches = Launches()
    with pytest.raises(KeyboardInterrupt):
        loop(AB, "never", launches, interrupt_at=("a", 2))
    assert launches.log[-2:] == [("stop", "a", "interrupted", ("a-c1-0",)), ("stop", "b", "interrupted", ("b-c1-1",))]


def test_a_consumer_that_sends_values_gets_every_message():
    """A Ray streaming task send()s into the node's generator (engine_adapters/cluster.py
    drive_group); the loop must not hand that on to a launcher's or callback's plain list."""
    launches = Launches()
    gen = run_cells(AB[:2], "per_cell", EngineManager(launches), engine_of=lambda c: engine(c.engine),
                    drive=lambda c, launch: [("ran", c.engine)], skip=lambda c, why: [])
    got = [next(gen)]
    while True:
        try:
            got.append(gen.send(object()))
        except StopIteration:
            break
    assert got == [("launch", "a"), ("ran", "a"), ("launch_ended", "a"), ("launch", "b"), ("ran", "b"),
                   ("launch_ended", "b")]


def test_the_cluster_package_imports_nothing_from_the_runner():
    """console/cluster/ shares the runner's code through console/cell_executor.py and the cell loop."""
    for path in sorted((REPO / "console" / "cluster").glob("*.py")):
        tree = ast.parse(path.read_text())
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "console.runner" not in modules, path
