"""The comparison table of ``launch/report.py``: one row per sweep point.

Each point's metrics are merged from its attempts (``grpokit.run_folder.metrics.merge_attempts``)
rather than read from ``<run_dir>/metrics.jsonl``, which is only rewritten at the end of an attempt.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from grpokit.reports.chain_view import chain_columns, chain_job_ids, read_sweep_chain
from grpokit.reports.summary import (
    REWARD_KEY,
    SCORE_KEY,
    gpu_hours,
    metrics_summary,
    point_reason,
    sweep_gpu_hours,
)
from grpokit.run_folder import startup_view
from grpokit.run_folder.metrics import merge_attempts, val_acc_keys
from grpokit.run_folder.point_state import WAITING_RUNG, at_rung, halving_final_target, point_state, rung_reason
from grpokit.run_folder.sweep_reader import Sweep
from grpokit.slurm.job_states import job_states

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """table: one row per point (columns listed in :func:`collect_report`).
    curves: per point index, a frame with columns step, reward and one column per val-core acc key.
    startups: per point index, the latest attempt's start-up timeline in one line ("" without one).
    """

    sweep: Sweep
    table: pd.DataFrame
    curves: dict[int, pd.DataFrame] = field(default_factory=dict)
    startups: dict[int, str] = field(default_factory=dict)  # index -> the latest attempt's one-line start-up


def collect_report(sweep: Sweep, ask_slurm: bool = True, now: datetime | None = None) -> SweepReport:
    """Summarise every point.

    Columns: ``index``, ``name``, each swept key, ``state``, ``attempts``, then
    :func:`grpokit.reports.summary.metrics_summary`'s keys (``last_step``, ``final_reward_mean``,
    ``final_acc:<src>``, ``final_acc_step:<src>``, ``best_acc:<src>``, ``best_acc_step:<src>``,
    ``final_response_length``,
    ``final_clip_ratio``, ``mean_step_s``, ``mean_<part>_s``, ``tokens_per_s``,
    ``throughput_per_gpu``), then ``gpu_hours`` (attempts that held GPUs for training only),
    ``startup_s`` (the latest attempt's job start -> first generation request, ``startup.json``), with
    ``after=[...]`` the chained job's ``chain``, ``chain_reason``, ``base_acc``, ``trained_acc``,
    ``acc_delta`` (:mod:`grpokit.reports.chain_view`), then ``reason``
    (:func:`grpokit.reports.summary.point_reason`), ``job_id``, ``run_dir``.
    ask_slurm=False skips the Slurm client commands (state then comes from status.json only).
    """
    chain = read_sweep_chain(sweep.path)
    chained = (chain or {}).get("points") or {}
    ids = [p.job_id for p in sweep.points if p.job_id] + chain_job_ids(chain)
    states = job_states(ids) if ask_slurm and ids else {}
    final_target = halving_final_target(sweep.path)  # a halving sweep: rungs are not the target
    rows: list[dict] = []
    curves: dict[int, pd.DataFrame] = {}
    startups: dict[int, str] = {}
    for p in sweep.points:
        slurm = states.get(p.job_id) if p.job_id else None
        df = merge_attempts(p.run_dir)
        row: dict = {"index": p.index, "name": p.name}
        row.update({k: p.swept.get(k) for k in sweep.swept_keys})
        row["state"] = state = at_rung(p, point_state(p, slurm), final_target)
        row["attempts"] = len(p.attempts)
        row.update(metrics_summary(df))
        row["gpu_hours"] = gpu_hours(p, slurm, now)
        timeline = startup_view.latest(p.run_dir, p.attempts)
        row["startup_s"] = (timeline or {}).get("first_generation_s")
        startups[p.index] = startup_view.one_line(timeline)
        if chain is not None:
            record = chained.get(p.name)
            row.update(chain_columns(record, p.run_dir, state, states.get((record or {}).get("job_id") or "")))
        row["reason"] = rung_reason(p, final_target) if state == WAITING_RUNG else point_reason(p, slurm, state)
        row["rehearsal"] = sweep.rehearsal  # rehearse=true: the stand-in trainer's made-up metrics
        row["job_id"] = p.job_id
        row["run_dir"] = str(p.run_dir)
        rows.append(row)
        reward_key = REWARD_KEY if REWARD_KEY in df.columns else SCORE_KEY
        keep = ["step"] + [k for k in (reward_key, *val_acc_keys(df.columns)) if k in df.columns]
        curve = df[keep].rename(columns={reward_key: "reward"})
        curves[p.index] = curve
    table = pd.DataFrame.from_records(rows)
    # Put the accuracy columns right after the reward, whatever order the points introduced them in.
    fixed_head = ["index", "name", *sweep.swept_keys, "state", "attempts", "last_step", "final_reward_mean"]
    acc_cols = sorted(
        c for c in table.columns if c.split(":")[0] in ("final_acc", "final_acc_step", "best_acc", "best_acc_step")
    )
    tail = [c for c in table.columns if c not in fixed_head and c not in acc_cols]
    table = table[[c for c in fixed_head if c in table.columns] + acc_cols + tail]
    return SweepReport(sweep=sweep, table=table, curves=curves, startups=startups)


def write_tables(report: SweepReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``report.csv`` and ``report.md`` under out_dir; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / "report.csv", out_dir / "report.md"
    report.table.to_csv(csv_path, index=False)
    md_cols = [c for c in report.table.columns if c not in ("run_dir",)]
    # Format cells ourselves: tabulate would re-parse ids such as "999999" as numbers.
    cells = report.table[md_cols].map(_md_cell)
    body = cells.to_markdown(index=False, disable_numparse=True)
    rehearsal = (
        "\n\n**Rehearsal** (rehearse=true): the kit's stand-in trainer ran instead of verl's; the metrics are "
        "made up, only the Slurm path (jobs, checkpoints, requeues) is real."
        if report.sweep.rehearsal
        else ""
    )
    lines = [f"- {p.name}: {report.startups[p.index]}" for p in report.sweep.points if report.startups.get(p.index)]
    startup = ""
    if lines:
        startup = "\n## Start-up (latest attempt; seconds, job start -> first generation request)\n\n"
        startup += "\n".join(lines) + "\n"
    title = f"# Sweep {report.sweep.name}{' (rehearsal)' if rehearsal else ''}{rehearsal}"
    md_path.write_text(f"{title}\n\n{gpu_hours_line(report.table)}\n\n{body}\n{startup}")
    return csv_path, md_path


def gpu_hours_line(table: pd.DataFrame) -> str:
    """report.md's line on the sweep's GPU hours: the sum of the ``gpu_hours`` column (over points
    and their attempts that held GPUs for training, elapsed x GPUs), saying how it is counted and
    how many points had no GPU count yet."""
    total, unknown = sweep_gpu_hours(list(table["gpu_hours"])) if "gpu_hours" in table.columns else (0.0, 0)
    points = len(table)
    line = (
        f"**GPU hours: {total:.2f}** (sum over the {points} point{'s' if points != 1 else ''} and their attempts "
        "that held GPUs for training of elapsed x GPUs; per point: the `gpu_hours` column)"
    )
    if unknown:
        plural = "s" if unknown != 1 else ""
        line += f"; {unknown} point{plural} without a recorded GPU count (status.json's slurm.gpus) not counted"
    return line


def _md_cell(v) -> str:
    if is_missing(v):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def tensorboard_command(sweep: Sweep) -> str:
    """One TensorBoard command for the whole sweep: TensorBoard finds every attempt's
    ``attempts/<k>/tensorboard`` below the sweep folder and names runs by their relative path."""
    return f"tensorboard --logdir {sweep.path.resolve()}"


def first_acc_column(table: pd.DataFrame, kind: str = "final_acc") -> str | None:
    """The first ``<kind>:<src>`` column, or None when no point logged validation accuracy."""
    cols = sorted(c for c in table.columns if c.startswith(kind + ":"))
    return cols[0] if cols else None


def is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))
