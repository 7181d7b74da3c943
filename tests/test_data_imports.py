"""No module under data/ imports another in a circle (issue 30): the import graph of data/*.py,
read with `ast`, is acyclic. Every import counts, at module level, inside a function (a lazy
import) or under `TYPE_CHECKING`: a circle hidden in a function is still a circle to a reader, and
`data/manifest.py` <-> `data/plans.py` was one of those until the plan code was split by job."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The data modules `path` imports, by module name (`plan_model` for `data.plan_model`)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from data import jsonfile` names the module in the alias, `from data.x import y` in the module
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        out |= {n.split(".")[1] for n in names if n.startswith("data.") and n.split(".")[1] in modules}
    return out - {path.stem}


def data_import_graph(folder: Path = DATA) -> dict[str, set[str]]:
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    return {m: _imports(folder / f"{m}.py", modules) for m in sorted(modules)}


def test_the_graph_is_read_from_the_real_modules():
    graph = data_import_graph()
    assert len(graph) > 30
    # imports the walk must see: top level, TYPE_CHECKING, and a module named in `from data import`
    assert "store" in graph["plan_loading"] and "plan_model" in graph["manifest"]
    assert "jsonfile" in graph["plan_loading"]


def test_data_modules_import_each_other_without_a_circle():
    try:
        order = list(graphlib.TopologicalSorter(data_import_graph()).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"data/ import circle: {' -> '.join(exc.args[1])}") from None
    assert order.index("plan_model") < order.index("manifest") < order.index("plan_loading") < order.index("plan_freeze")


def test_a_circle_is_found(tmp_path):
    """The check can fail: two modules importing each other, one of them lazily, are a circle."""
    (tmp_path / "a.py").write_text("from data.b import x\n")
    (tmp_path / "b.py").write_text("def x():\n    from data.a import y\n")
    graph = data_import_graph(tmp_path)
    assert graph == {"a": {"b"}, "b": {"a"}}
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError:
        return
    raise AssertionError("the circle a <-> b was not found")
