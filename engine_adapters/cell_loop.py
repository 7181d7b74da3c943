"""The cell loop: one sequence of cells on one GPU, with the plan's restart rule and the engines up.

The same loop runs a local campaign (console/runner.py, in the console process) and each pair
group of a cluster campaign (engine_adapters/cluster.py, on the node Ray placed it on); they
differ only in how a launch is made and recorded (a `Launcher`: the store locally, messages
streamed back to the console from a node) and in how a cell is driven. The rules (docs/plans.md, "Restarts",
`sweep.restart`):

- `per_repeat`: a fresh launch for every cell; `per_cell`: a fresh launch when the engine is not
  up or served another concurrency last; `never`: an engine, once up, serves every later cell
  (other engines stay up beside it). Before a fresh launch under `per_repeat` or `per_cell`
  every engine up is stopped: one engine at a time on the GPU.
- An engine that does not start fails its cell and every later cell of it is skipped.
- An engine that exited while serving a cell is stopped (its launch recorded as crashed); its
  next cell gets a fresh launch.
- At the end every engine is stopped ('measured'); if the loop is left by an exception (Ctrl-C,
  a lost console) they are stopped as 'interrupted' and the exception goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, TypeVar

from data.plan_model import EngineSpec

RESTARTS = ("per_repeat", "per_cell", "never")
NOT_STARTED = "its engine did not start"  # the cell whose launch failed
SKIPPED = "skipped: its engine did not start"  # the engine's later cells



class CellLike(Protocol):
    @property
    def concurrency(self) -> int: ...


C = TypeVar("C", bound=CellLike)
Message = Any  # what a launcher or a drive yields to its caller (engine_adapters/cluster.py messages)


@dataclass
class Launch:
    """One engine up: its spec, its process (engine_adapters.lifecycle.EngineProcess) and the
    runs it served."""
    engine: EngineSpec
    process: Any
    run_ids: list[str] = field(default_factory=list)

    @property
    def launch_id(self) -> str:
        return self.process.launch_id


class Launcher(Protocol):
    """How launches are made and recorded where the cells run."""

    def start(self, engine: EngineSpec) -> tuple[Any | None, list[Message]]:
        """(the healthy EngineProcess, or None when it did not start, recorded as such; messages)."""

    def stop(self, launch: Launch, outcome: str) -> list[Message]:
        """Stop the engine and record its launch's outcome (measured, interrupted)."""


class EngineManager:
    """The engines up on one GPU, at most one launch per engine; started and stopped through a
    Launcher."""

    def __init__(self, launcher: Launcher):
        self.launcher = launcher
        self.up: dict[str, Launch] = {}

    def launch(self, engine: EngineSpec) -> tuple[Launch | None, list[Message]]:
        process, messages = self.launcher.start(engine)
        if process is None:
            return None, messages
        self.up[engine.name] = launch = Launch(engine, process)
        return launch, messages

    def stop(self, name: str, outcome: str = "measured") -> list[Message]:
        launch = self.up.pop(name, None)
        return self.launcher.stop(launch, outcome) if launch is not None else []

    def stop_all(self, outcome: str = "measured") -> list[Message]:
        return [m for name in list(self.up) for m in self.stop(name, outcome)]


def fresh_launch(restart: str, engine: str, up: Iterable[str], served: dict[str, int], concurrency: int) -> bool:
    """Does this cell need a fresh launch of `engine` (the restart rule; `served`: the
    concurrency each engine served last)?"""
    return (restart == "per_repeat" or engine not in up
            or (restart == "per_cell" and served.get(engine) != concurrency))


def run_cells(cells: Sequence[C], restart: str, engines: EngineManager, *, engine_of: Callable[[C], EngineSpec],
              drive: Callable[[C, Launch], Iterable[Message]], skip: Callable[[C, str], Iterable[Message]],
              before: Callable[[C], None] | None = None) -> Iterator[Message]:
    """Run `cells` in order under the restart rule (module docstring). `drive(cell, launch)` runs
    one cell on its engine (it adds its run id to `launch.run_ids`), `skip(cell, reason)` is told
    of a cell not run (NOT_STARTED or SKIPPED), `before(cell)` runs before a cell that will run
    (its launch included). Yields what the launcher and the callbacks return, in order."""
    failed: set[str] = set()
    served: dict[str, int] = {}
    # every message is yielded by a plain `for`: `yield from` would pass on what a consumer
    # send()s (a Ray streaming task does) to lists, which have no send()
    try:
        for cell in cells:
            engine = engine_of(cell)
            if engine.name in failed:
                for m in skip(cell, SKIPPED):
                    yield m
                continue
            if before is not None:
                before(cell)
            if fresh_launch(restart, engine.name, engines.up, served, cell.concurrency):
                if restart != "never":
                    for m in engines.stop_all():  # one engine at a time on the GPU
                        yield m
                launch, messages = engines.launch(engine)
                for m in messages:
                    yield m
                if launch is None:
                    failed.add(engine.name)
                    for m in skip(cell, NOT_STARTED):
                        yield m
                    continue
            launch = engines.up[engine.name]
            served[engine.name] = cell.concurrency
            for m in drive(cell, launch):
                yield m
            if launch.process.exit_cause():  # a crashed launch; the engine's next cell gets a fresh one
                for m in engines.stop(engine.name):
                    yield m
        for m in engines.stop_all():
            yield m
    except BaseException:  # Ctrl-C, a driver error, or the consumer went away (GeneratorExit)
        engines.stop_all("interrupted")
        raise
