"""Which learning curves ``curves.png`` draws one by one, and the spread of all the others.

A sweep of up to :data:`SMALL_SWEEP` points draws every point as its own labelled line. A larger one
draws its best :data:`TOP_K` points (by the report's metric) as labelled lines and every other point
as one median line with a shaded percentile band per step: 1,000 unlabelled lines are one block of
colour. Pure pandas/numpy, no matplotlib.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

SMALL_SWEEP = 8  # up to this many points every curve is its own labelled line
TOP_K = 5  # a larger sweep: this many best points are drawn as lines, the rest as a band
BAND = (10.0, 90.0)  # the shaded spread of the rest, in percent


def ranking_column(table: pd.DataFrame, acc_key: str | None = None) -> str | None:
    """The column ranking the points: ``final_acc:<src>`` of the drawn ``val-core/<src>/acc/mean@1``
    (acc_key) when the table has it, else the first ``final_acc:<src>``, else ``final_reward_mean``;
    None when the table has none of them."""
    if acc_key and acc_key.startswith("val-core/"):
        src = acc_key.removeprefix("val-core/").rsplit("/acc/", 1)[0]
        if f"final_acc:{src}" in table.columns:
            return f"final_acc:{src}"
    accs = sorted(c for c in table.columns if c.startswith("final_acc:"))
    if accs:
        return accs[0]
    return "final_reward_mean" if "final_reward_mean" in table.columns else None


def best_points(table: pd.DataFrame, metric: str | None, k: int = TOP_K) -> list[int]:
    """The ``index`` of the k points with the highest ``metric`` (higher is better), best first; a
    tie goes to the lower index; points without a value (NaN) are never among them. [] when
    metric is None."""
    if metric is None or metric not in table.columns:
        return []
    values = pd.to_numeric(table[metric], errors="coerce")
    known = table.assign(_v=values).dropna(subset=["_v"])
    ranked = known.sort_values(["_v", "index"], ascending=[False, True], kind="stable")
    return [int(i) for i in ranked["index"].head(k)]


@dataclass(frozen=True)
class CurvePlan:
    """labelled: point indices drawn as their own labelled line (best first when ranked);
    banded: the indices summarised by the median and band; metric: the ranking column (None: not
    ranked, every point is labelled)."""

    labelled: list[int]
    banded: list[int]
    metric: str | None


def plan_curves(
    table: pd.DataFrame, indices: list[int], acc_key: str | None = None, small: int = SMALL_SWEEP, k: int = TOP_K
) -> CurvePlan:
    """Split the points with a curve (indices, in table order) into labelled lines and the band.

    Up to ``small`` points: all labelled, not ranked. More: the best k by :func:`ranking_column`
    labelled (fewer when fewer have a value), the rest banded."""
    if len(indices) <= small:
        return CurvePlan(labelled=list(indices), banded=[], metric=None)
    metric = ranking_column(table, acc_key)
    have = set(indices)
    top = best_points(table[table["index"].isin(have)], metric, k)
    chosen = set(top)
    return CurvePlan(labelled=top, banded=[i for i in indices if i not in chosen], metric=metric)


def band_frame(series: list[pd.Series], band: tuple[float, float] = BAND) -> pd.DataFrame:
    """Per step, the spread of several points' values of one metric.

    series: one per point, values indexed by step (NaN and missing steps ignored). Returns columns
    ``step``, ``median``, ``lo``, ``hi`` (the band's percentiles), ``n`` (points with a value at
    that step), sorted by step; empty (same columns) when no series has a value."""
    cols = ["step", "median", "lo", "hi", "n"]
    kept = [s.dropna() for s in series]
    kept = [s[~s.index.duplicated(keep="last")] for s in kept if len(s)]
    if not kept:
        return pd.DataFrame(columns=cols)
    wide = pd.concat(kept, axis=1, ignore_index=True).sort_index()  # step x point
    values = wide.to_numpy(dtype=float)
    lo, med, hi = np.nanpercentile(values, [band[0], 50.0, band[1]], axis=1)
    return pd.DataFrame(
        {"step": wide.index.to_numpy(), "median": med, "lo": lo, "hi": hi, "n": (~np.isnan(values)).sum(axis=1)}
    )


def swept_label(row: dict, swept_keys: list[str]) -> str:
    """A point named by its swept values, ``lr=1e-06, kl_coef=0.1``: each key's last dotted part
    (the whole key when two keys share it)."""
    short = [k.rsplit(".", 1)[-1] for k in swept_keys]
    names = [s if short.count(s) == 1 else k for s, k in zip(short, swept_keys, strict=True)]
    return ", ".join(f"{n}={_value(row.get(k))}" for n, k in zip(names, swept_keys, strict=True))


def _value(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return str(v)
