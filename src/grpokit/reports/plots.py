"""PNG plots of a sweep report: learning curves on shared axes and a final-accuracy heatmap."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # login nodes have no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from grpokit.reports.report_table import SweepReport, first_acc_column  # noqa: E402

log = logging.getLogger(__name__)

MAX_LEGEND = 20  # beyond this a legend covers the curves


def plot_curves(report: SweepReport, path: Path, acc_key: str | None = None) -> Path:
    """Reward (``critic/rewards/mean``) and validation accuracy per step, one line per point, on
    shared step axes (two panels). acc_key: the ``val-core/<src>/acc/mean@1`` column to draw
    (default: the first one found). Returns path."""
    if acc_key is None:
        keys = sorted({c for df in report.curves.values() for c in df.columns if c.startswith("val-core/")})
        acc_key = keys[0] if keys else None
    fig, (ax_r, ax_a) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    names = dict(zip(report.table["index"], report.table["name"], strict=True))
    for idx, df in report.curves.items():
        label = names.get(idx, str(idx))
        if "reward" in df.columns:
            s = df[["step", "reward"]].dropna()
            ax_r.plot(s["step"], s["reward"], lw=1, label=label)
        if acc_key and acc_key in df.columns:
            s = df[["step", acc_key]].dropna()
            ax_a.plot(s["step"], s[acc_key], lw=1, marker=".", label=label)
    ax_r.set_ylabel("critic/rewards/mean")
    ax_a.set_ylabel(acc_key or "validation accuracy (none logged)")
    ax_a.set_xlabel("training step")
    ax_r.set_title(f"sweep {report.sweep.name}")
    for ax in (ax_r, ax_a):
        ax.grid(alpha=0.3)
    # A legend only for labelled lines (no point logged a reward: none; matplotlib would warn).
    if 0 < len(ax_r.get_legend_handles_labels()[0]) <= MAX_LEGEND:
        ax_r.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def heatmap_frame(table: pd.DataFrame, x_key: str, y_key: str, value: str) -> pd.DataFrame:
    """Pivot ``value`` over two swept keys (rows y_key, columns x_key); points sharing a cell
    (other axes swept too) are averaged."""
    for key in (x_key, y_key, value):
        if key not in table.columns:
            raise ValueError(f"heatmap: no column {key!r}; swept keys and metrics are {list(table.columns)}")
    grid = table.pivot_table(index=y_key, columns=x_key, values=value, aggfunc="mean", dropna=False)
    # Swept values come from the command line as text: order "8, 16" by number, not "16, 8".
    return grid.loc[sorted(grid.index, key=_natural), sorted(grid.columns, key=_natural)]


def _natural(value) -> tuple:
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def value_steps(table: pd.DataFrame, value: str, x_key: str, y_key: str) -> tuple[list[int], pd.DataFrame]:
    """The steps ``value`` was logged at (``final_acc:<src>``'s ``final_acc_step:<src>``), sorted,
    and per heatmap cell its label (``@8``, ``@4,8`` when the points of a cell differ); ``[]`` and
    an empty frame for a value without a step column."""
    step_col = value.replace("final_acc:", "final_acc_step:", 1) if value.startswith("final_acc:") else None
    if step_col is None or step_col not in table.columns:
        return [], pd.DataFrame()
    known = table.dropna(subset=[step_col])
    steps = sorted({int(s) for s in known[step_col]})

    def label(cell) -> str:
        return "@" + ",".join(str(s) for s in sorted({int(x) for x in cell.dropna()}))

    at = table.pivot_table(index=y_key, columns=x_key, values=step_col, aggfunc=label, dropna=False)
    return steps, at.reindex(index=sorted(at.index, key=_natural), columns=sorted(at.columns, key=_natural))


def steps_note(steps: list[int]) -> str:
    """The title's note on the steps: ``, step 8`` or ``, steps differ: 4, 8, 12 (each cell: @step)``."""
    if not steps:
        return ""
    if len(steps) == 1:
        return f", step {steps[0]}"
    return f"\nsteps differ: {', '.join(map(str, steps))} (each cell: @step)"


def plot_heatmap(report: SweepReport, path: Path, x_key: str, y_key: str, value: str | None = None) -> Path | None:
    """Heatmap of final accuracy (default the first ``final_acc:<src>`` column) over two swept keys.
    The title names the step the values come from; when points stopped at different steps (halving,
    pruning, failures) it says so and each cell carries its ``@step``.
    Returns path, or None when no point logged validation accuracy."""
    value = value or first_acc_column(report.table)
    if value is None:
        log.warning("no validation accuracy in any point; heatmap skipped")
        return None
    grid = heatmap_frame(report.table, x_key, y_key, value)
    data = grid.to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 * len(grid.columns) + 3, 0.8 * len(grid.index) + 2))
    im = ax.imshow(np.ma.masked_invalid(data), cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), [str(i) for i in grid.index])
    ax.set_xlabel(x_key)
    ax.set_ylabel(y_key)
    steps, at = value_steps(report.table, value, x_key, y_key)
    for (i, j), v in np.ndenumerate(data):
        if not np.isnan(v):
            cell = f"{v:.3f}" if len(steps) <= 1 else f"{v:.3f}\n{at.iat[i, j]}"  # steps differ: each cell's
            ax.text(j, i, cell, ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(im, ax=ax, label=value)
    rehearsal = "REHEARSAL (made-up metrics): " if getattr(report.sweep, "rehearsal", False) else ""
    ax.set_title(f"{rehearsal}{value} ({report.sweep.name}){steps_note(steps)}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
