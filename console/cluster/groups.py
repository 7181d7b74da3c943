"""Pair-affine placement: the cells a paired comparison compares run back to back on one GPU.

Paired comparisons (stats/throughput_rules.py, the quality gates) pair runs of the compared
engines at the same concurrency, kind and repeat; such a slot is one group, its cells in the
plan's interleave order (engines in plan order), and a group is one Ray task on one GPU
(docs/cluster.md). Groups are dispatched in the order of their first cell in the plan.
"""

from __future__ import annotations

from typing import Any, Sequence


def slot_of(cell: Any) -> tuple:
    return (cell.phase, cell.concurrency, cell.kind, cell.repeat)


def pair_groups(cells: Sequence[Any]) -> list[list[Any]]:
    """The cells grouped by slot, each group in plan order (pure)."""
    groups: dict[tuple, list[Any]] = {}
    for c in cells:
        groups.setdefault(slot_of(c), []).append(c)
    return list(groups.values())
