"""PNG plots of a sweep report: learning curves on shared axes and a final-accuracy heatmap.

Every title is fitted inside its figure (:func:`grpokit.reports.figure_text.fit_title`) and starts
with the rehearsal mark when the sweep is a rehearsal.
"""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # login nodes have no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from grpokit.reports.curve_bands import BAND, band_frame, plan_curves, swept_label  # noqa: E402
from grpokit.reports.figure_text import fit_title, note_empty, rehearsal_prefix  # noqa: E402
from grpokit.reports.report_table import SweepReport, first_acc_column  # noqa: E402

log = logging.getLogger(__name__)


def _is_rehearsal(report: SweepReport) -> bool:
    return bool(getattr(report.sweep, "rehearsal", False))


def curves_figure(report: SweepReport, acc_key: str | None = None) -> plt.Figure:
    """The figure of :func:`plot_curves` (not saved; the caller closes it)."""
    if acc_key is None:
        keys = sorted({c for df in report.curves.values() for c in df.columns if c.startswith("val-core/")})
        acc_key = keys[0] if keys else None
    fig, (ax_r, ax_a) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    table = report.table
    plan = plan_curves(table, [i for i in report.curves], acc_key)
    rows = {int(r["index"]): r for r in table.to_dict("records")} if len(table) else {}
    swept_keys = list(getattr(report.sweep, "swept_keys", []) or [])
    panels = ((ax_r, "reward", "-"), (ax_a, acc_key, "."))
    for rank, idx in enumerate(plan.labelled):
        row = rows.get(idx, {})
        if plan.metric is None:  # a small sweep: every point by its name, as always
            label = str(row.get("name", idx))
        else:
            value = row.get(plan.metric)
            shown = f" ({value:.3g})" if isinstance(value, float) and not np.isnan(value) else ""
            label = f"#{rank + 1} {swept_label(row, swept_keys) if swept_keys else row.get('name', idx)}{shown}"
        color = f"C{rank % 10}"
        for ax, key, marker in panels:
            df = report.curves[idx]
            if key and key in df.columns:
                s = df[["step", key]].dropna()
                ax.plot(
                    s["step"],
                    s[key],
                    lw=1.5 if plan.metric else 1,
                    marker=marker if marker != "-" else None,
                    color=color,
                    label=label,
                )
    if plan.banded:
        rest = f"other {len(plan.banded)} points"
        for ax, key, _ in panels:
            series = [
                report.curves[i].set_index("step")[key] for i in plan.banded if key and key in report.curves[i].columns
            ]
            band = band_frame(series)
            if band.empty:
                continue
            ax.fill_between(
                band["step"],
                band["lo"],
                band["hi"],
                color="0.6",
                alpha=0.35,
                lw=0,
                label=f"{rest}: {BAND[0]:g}-{BAND[1]:g} percentile",
            )
            ax.plot(band["step"], band["median"], color="0.25", lw=1, ls="--", label=f"{rest}: median")
    ax_r.set_ylabel("critic/rewards/mean")
    ax_a.set_ylabel(acc_key or "validation accuracy (none logged)")
    ax_a.set_xlabel("training step")
    if not ax_r.lines:
        note_empty(ax_r, "no point logged critic/rewards/mean (or critic/score/mean)")
    if not ax_a.lines:
        note_empty(ax_a, f"no point logged {acc_key}" if acc_key else "no point logged val-core/<source>/acc/mean@1")
    for ax in (ax_r, ax_a):
        ax.grid(alpha=0.3)
    # A legend only for labelled lines (no point logged a reward: none; matplotlib would warn).
    if ax_r.get_legend_handles_labels()[0]:
        title = f"best {len(plan.labelled)} by {plan.metric}" if plan.metric and plan.labelled else None
        ax_r.legend(fontsize=7, loc="best", title=title, title_fontsize=7)
    title = ax_r.set_title(f"{rehearsal_prefix(_is_rehearsal(report))}sweep {report.sweep.name}")
    fit_title(fig, title, fig.tight_layout)
    return fig


def plot_curves(report: SweepReport, path: Path, acc_key: str | None = None) -> Path:
    """Reward (``critic/rewards/mean``) and validation accuracy per step on shared step axes (two
    panels). Up to 8 points: one labelled line per point (its name). More: the best 5 by the
    report's metric (``final_acc:<src>`` of acc_key, else ``final_reward_mean``) as labelled lines
    named by their swept values, every other point as a median line and a shaded 10-90 percentile
    band per step (:mod:`grpokit.reports.curve_bands`). A panel without data says ``no data yet``.
    acc_key: the ``val-core/<src>/acc/mean@1`` column to draw (default: the first one found).
    Returns path."""
    fig = curves_figure(report, acc_key)
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


def state_cells(table: pd.DataFrame, x_key: str, y_key: str) -> pd.DataFrame:
    """Per heatmap cell (rows y_key, columns x_key, in :func:`heatmap_frame`'s order) the state
    words of its points, ``cancelled`` or ``failed, queued`` (sorted, each once); "" for a cell
    without a point. An empty frame when the table has no ``state`` column."""
    if "state" not in table.columns:
        return pd.DataFrame()

    def words(cell) -> str:
        return ", ".join(sorted({str(s) for s in cell.dropna()}))

    at = table.pivot_table(index=y_key, columns=x_key, values="state", aggfunc=words, dropna=False)
    at = at.reindex(index=sorted(at.index, key=_natural), columns=sorted(at.columns, key=_natural))
    return at.fillna("")


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


def heatmap_figure(report: SweepReport, x_key: str, y_key: str, value: str | None = None) -> plt.Figure | None:
    """The figure of :func:`plot_heatmap` (not saved; the caller closes it); None without accuracy."""
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
    states = state_cells(report.table, x_key, y_key)
    for (i, j), v in np.ndenumerate(data):
        if not np.isnan(v):
            cell = f"{v:.3f}" if len(steps) <= 1 else f"{v:.3f}\n{at.iat[i, j]}"  # steps differ: each cell's
            ax.text(j, i, cell, ha="center", va="center", color="w", fontsize=8)
        elif not states.empty and states.iat[i, j]:  # no value yet: say why (cancelled, queued, failed)
            ax.text(j, i, states.iat[i, j], ha="center", va="center", color="0.3", fontsize=8, style="italic")
    fig.colorbar(im, ax=ax, label=value)
    title = ax.set_title(f"{rehearsal_prefix(_is_rehearsal(report))}{value} ({report.sweep.name}){steps_note(steps)}")
    fit_title(fig, title, fig.tight_layout)
    return fig


def plot_heatmap(report: SweepReport, path: Path, x_key: str, y_key: str, value: str | None = None) -> Path | None:
    """Heatmap of final accuracy (default the first ``final_acc:<src>`` column) over two swept keys.
    The title names the step the values come from; when points stopped at different steps (halving,
    pruning, failures) it says so and each cell carries its ``@step``. A cell without a value names
    its points' state (``cancelled``, ``queued``, ``failed``). The title is wrapped to fit inside the
    figure. Returns path, or None when no point logged validation accuracy."""
    fig = heatmap_figure(report, x_key, y_key, value)
    if fig is None:
        return None
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
