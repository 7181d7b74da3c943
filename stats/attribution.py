"""WER error attribution: which utterances carry a WER change (a diagnostic, never a filter).

The reference campaign found one prompt contributing 57 extra errors to a net increase of 49; the
reviewer needs that figure next to the gate, together with whether the change survives removing
that prompt. Nothing here drops data: the check's verdict is always computed over every id.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stats.bootstrap import CellArrays, cell_bounds

TOP_N = 5


def _without(cell: CellArrays, drop: int) -> CellArrays:
    keep = np.ones(cell.k, bool)
    keep[drop] = False
    return CellArrays(
        tuple(i for i, k in zip(cell.ids, keep) if k),
        cell.e_base[keep], cell.e_cand[keep], cell.n_base[keep],
        cell.sim_base[keep], cell.sim_cand[keep], cell.mos_base[keep], cell.mos_cand[keep],
    )


def wer_attribution(cell: CellArrays, concurrency: int, config, top_n: int = TOP_N) -> dict[str, Any]:
    """Per-utterance contribution to the net error change at one concurrency.

    `contributions`: the top ids in the direction of the net change (largest increases when errors
    went up), with base/candidate errors, delta and share of the net change. `without_top`: the
    point estimate and bound recomputed with the top id removed (same seed, K-1 ids)."""
    delta = cell.e_cand - cell.e_base
    net = float(np.sum(delta))
    words = float(np.sum(cell.n_base))
    sign = 1.0 if net >= 0 else -1.0
    order = sorted(range(cell.k), key=lambda i: (-sign * delta[i], cell.ids[i]))
    top = [i for i in order[:top_n] if delta[i] != 0]
    contributions = [
        {
            "utt_id": cell.ids[i],
            "base_errors": int(cell.e_base[i]),
            "cand_errors": int(cell.e_cand[i]),
            "delta": int(delta[i]),
            "share_of_net": float(delta[i] / net) if net else None,
            "base_words": int(cell.n_base[i]),
        }
        for i in top
    ]
    out: dict[str, Any] = {
        "concurrency": int(concurrency),
        "metric": "wer",
        "ids": cell.k,
        "net_error_change": int(net),
        "errors_increased_ids": int(np.sum(delta > 0)),
        "errors_decreased_ids": int(np.sum(delta < 0)),
        "base_words": int(words),
        "point_pp": 100.0 * net / words if words else None,
        "contributions": contributions,
        "top_id": contributions[0]["utt_id"] if contributions else None,
        "without_top": None,
        "survives_without_top": None,
        "note": "diagnostic only; the check is computed over every id",
    }
    if top and cell.k >= 3:
        rest = _without(cell, top[0])
        r = cell_bounds(rest, draws=config.draws, seed=config.seed, confidence=config.confidence,
                        method=config.method, metrics=("wer",))["wer"]
        margin = float(config.margins["wer"])
        rest_net = net - float(delta[top[0]])
        out["without_top"] = {
            "removed": cell.ids[top[0]],
            "net_error_change": int(rest_net),
            "point_pp": r.point,
            "bound_pp": r.bound,
            "would_pass": bool(r.bound < margin),
        }
        # "survives" = the net change keeps its direction (and stays non-zero) without the top id.
        out["survives_without_top"] = bool(rest_net != 0 and np.sign(rest_net) == np.sign(net))
    return out
