"""The rows of ``launch/status.py``: one per sweep point, and their rich rendering.

Reads only files (docs/run-folder.md) and Slurm's client commands, so it runs on the login node
while the jobs write.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rich import box
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from grpokit.reports.chain_view import shown_reason
from grpokit.reports.summary import last_reward, point_reason
from grpokit.run_folder import startup_view
from grpokit.run_folder.metrics import merge_attempts, val_acc_keys
from grpokit.run_folder.point_state import (
    WAITING_RUNG,
    at_rung,
    halving_final_target,
    open_attempt_end,
    point_state,
    rung_reason,
)
from grpokit.run_folder.slurm_silence import note_answered, note_unanswered, silence_line
from grpokit.run_folder.status_record import attempt_elapsed_s
from grpokit.run_folder.sweep_reader import Point, Sweep, missing_reason
from grpokit.slurm import job_states as slurm_states
from grpokit.slurm.job_states import SlurmJobState

log = logging.getLogger(__name__)

#: Shown states whose elapsed time still grows (an open attempt's end is not known yet).
LIVE_STATES = ("queued", "running")
#: Seconds ``status`` waits for Slurm's clients, all together: when slurmctld does not answer, the
#: rows come from the run folders and the command still returns within 5 s.
SLURM_BUDGET_S = 3.0


def job_states(job_ids: list[str]) -> dict[str, SlurmJobState]:
    """Slurm's answer for ``status`` (:func:`grpokit.slurm.job_states.job_states` within
    :data:`SLURM_BUDGET_S`); its ``unanswered`` says when slurmctld did not answer."""
    return slurm_states.job_states(job_ids, budget_s=SLURM_BUDGET_S)


def slurm_note(sweep_dir, asked: bool, states, now: datetime | None = None) -> str | None:
    """The line saying since when Slurm has not answered (``<sweep>/slurm_unanswered.json`` keeps the
    first unanswered ask), None when it answered or was not asked; an answer ends the silence."""
    if not asked:
        return None
    unanswered = getattr(states, "unanswered", None)
    if not unanswered:
        note_answered(sweep_dir)
        return None
    now = now or datetime.now(UTC)
    return silence_line(note_unanswered(sweep_dir, unanswered, now), now, unanswered)


STATE_STYLE = {
    "queued": "yellow",
    "running": "cyan",
    "completed": "green",
    "failed": "bold red",
    "preempted": "magenta",
    "timeout": "red",
    "cancelled": "dim",
    "skipped_no_gpu": "yellow",
    "pruned": "magenta",
    "waiting_rung": "yellow",
    "not submitted": "dim",
    "unknown": "dim",
}


@dataclass
class StatusRow:
    """One point's line. Steps are verl global steps; elapsed_s sums all attempts (seconds);
    val_acc is the last ``val-core/<src>/acc/mean@1`` of the first data source (NaN when none);
    reason: why the point is in its state, whole (:func:`grpokit.reports.summary.point_reason`; the
    table shows its first line, ``--json`` all of it)."""

    index: int
    name: str
    swept: dict
    job_id: str | None
    state: str
    attempts: int
    step: int | None
    target_step: int | None
    last_reward: float
    val_acc: float
    elapsed_s: float | None
    reason: str | None = None
    extra: dict = field(default_factory=dict)
    eta_s: float | None = None  # running points: steps left x measured step time (:func:`eta_s`)
    startup: dict | None = None  # the latest attempt's startup.json (grpokit.runtime.startup)

    @property
    def fraction(self) -> float:
        """Progress in [0, 1]; 0 when the target is unknown."""
        if not self.target_step or self.step is None:
            return 0.0
        return max(0.0, min(1.0, self.step / self.target_step))


def status_row(
    point: Point, slurm: SlurmJobState | None, now: datetime | None = None, final_target: int | None = None
) -> StatusRow:
    """Build one point's row from its status.json, merged metrics and Slurm's answer; final_target:
    a halving sweep's last target step (:func:`grpokit.run_folder.point_state.halving_final_target`)."""
    recorded_step = point.status.last_step if point.status is not None else None
    target_step = point.status.target_step if point.status is not None else None
    df = merge_attempts(point.run_dir)
    metric_step = int(df["step"].max()) if len(df) else None
    steps = [s for s in (recorded_step, metric_step) if s is not None]
    acc_keys = val_acc_keys(df.columns)
    val_acc = math.nan
    if acc_keys:
        s = df[acc_keys[0]].dropna()
        val_acc = float(s.iloc[-1]) if len(s) else math.nan
    attempts = point.attempts
    state = at_rung(point, point_state(point, slurm), final_target)
    elapsed: float | None = None
    if attempts:
        last_end = open_attempt_end(point, slurm) if state not in LIVE_STATES else None
        elapsed = sum(attempt_elapsed_s(a, now) or 0.0 for a in attempts[:-1])
        elapsed += attempt_elapsed_s(attempts[-1], last_end or now) or 0.0
    elif slurm is not None and slurm.elapsed_s:
        elapsed = slurm.elapsed_s
    step, target = (max(steps) if steps else None), target_step
    return StatusRow(
        index=point.index,
        name=point.name,
        swept=point.swept,
        job_id=point.job_id,
        state=state,
        attempts=len(attempts),
        step=max(steps) if steps else None,
        target_step=target_step,
        last_reward=last_reward(df),
        val_acc=val_acc,
        elapsed_s=elapsed,
        reason=missing_reason(point)
        if point.missing
        else rung_reason(point, final_target)
        if state == WAITING_RUNG
        else point_reason(point, slurm, state, whole=True),
        eta_s=eta_s(df, step, target) if state == "running" else None,
        startup=startup_view.latest(point.run_dir, attempts),
    )


def startup_s(row: StatusRow) -> float | None:
    """Seconds from the latest attempt's job start to its first generation request (None: unknown)."""
    return (row.startup or {}).get("first_generation_s")


def eta_s(df, step: int | None, target: int | None, last: int = 5) -> float | None:
    """Seconds to the target: steps left x the median of verl's ``timing_s/step`` over the last
    ``last`` logged steps (the measured step time, validation and saving included); None before a
    step was measured or without a target."""
    if not target or step is None or "timing_s/step" not in df.columns:
        return None
    times = df["timing_s/step"].dropna().tail(last)
    if not len(times):
        return None
    return max(0, target - step) * float(times.median())


def collect_rows(sweep: Sweep, now: datetime | None = None, notes: list[str] | None = None) -> list[StatusRow]:
    """Rows for every point; Slurm is asked once for all job ids (the chained jobs' too: with
    ``after=[...]`` each row's ``extra`` holds :func:`grpokit.reports.chain_view.chain_columns`).
    notes: gets :func:`slurm_note`'s line when Slurm did not answer."""
    from grpokit.reports.chain_view import chain_columns, chain_job_ids, read_sweep_chain

    chain = read_sweep_chain(sweep.path)
    ids = [p.job_id for p in sweep.points if p.job_id] + chain_job_ids(chain)
    states = job_states(ids)
    if (line := slurm_note(sweep.path, bool(ids), states)) is not None and notes is not None:
        notes.append(line)
    final = halving_final_target(sweep.path)
    rows = [status_row(p, states.get(p.job_id) if p.job_id else None, now, final) for p in sweep.points]
    for row in rows:
        row.extra["rehearsal"] = sweep.rehearsal
    if chain is not None:
        for p, row in zip(sweep.points, rows, strict=True):
            record = (chain.get("points") or {}).get(p.name)
            row.extra.update(
                chain_columns(record, p.run_dir, row.state, states.get((record or {}).get("job_id") or ""))
            )
    return rows


def row_json(row: StatusRow) -> dict:
    """A row as plain JSON values (NaN -> None): the objects ``status.py --json`` prints (``rehearsal``:
    the sweep ran the stand-in trainer, rehearse=true)."""

    def clean(v):
        return None if isinstance(v, float) and math.isnan(v) else v

    return {
        "index": row.index,
        "name": row.name,
        "swept": row.swept,
        "job_id": row.job_id,
        "state": row.state,
        "reason": row.reason,
        "attempts": row.attempts,
        "step": row.step,
        "target_step": row.target_step,
        "last_reward": clean(row.last_reward),
        "val_acc": clean(row.val_acc),
        "elapsed_s": clean(row.elapsed_s),
        "eta_s": clean(row.eta_s),
        "startup_s": startup_s(row),
        "startup": startup_view.one_line(row.startup) or None,
        "rehearsal": bool(row.extra.get("rehearsal")),
        **({k: row.extra[k] for k in ("chain", "chain_reason")} if "chain" in row.extra else {}),
    }


def format_duration(seconds: float | None) -> str:
    """Seconds to ``[Dd ]HH:MM:SS``; ``-`` when unknown."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d " if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def _num(v: float, fmt: str = "{:.3f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


#: Columns dropped first when the terminal is narrow, the point's name still whole.
LIGHT_DROPS = ("start-up", "ETA", "elapsed", "val acc", "chain")
#: Then the name is cut to its ``NNN`` prefix (the swept values stay in their own columns), the
#: progress bar narrows to 10, and these go, in this order. point, job, state, step and reason stay.
HEAVY_DROPS = ("#", "progress", "reward", "att", "swept")
DROP_ORDER = LIGHT_DROPS + HEAVY_DROPS
REASON_MIN = 12  # the reason column's narrowest useful width (cut with an ellipsis)
SWEPT_HEADER_MIN = 10  # a swept key's header folds onto lines of this width rather than widen its column


def _folded(header: str, width: int = SWEPT_HEADER_MIN) -> str:
    """A long key name on several lines, broken after its underscores (``train_batch_size`` ->
    ``train_\nbatch_size``): a swept column is as wide as its values, not its key's name."""
    lines: list[str] = []
    for part in re.split(r"(?<=_)", header):
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return "\n".join(line for line in lines if line)


def _short_name(name: str) -> str:
    return name.split("_", 1)[0]


def render_table(sweep: Sweep, rows: list[StatusRow], width: int | None = None) -> Table:
    """A rich Table: #, point, swept values, job, state, attempts, step/target, progress bar,
    last reward, val acc, elapsed, ETA, (start-up: the latest attempt's seconds to its first
    generation request, when a point has one), (chain), reason (its first line).

    width: the terminal's columns. job, state and step never shrink or wrap; reason takes what is
    left (at least 12 columns, at most 60) and is cut with an ellipsis. Until the table fits, the
    columns of :data:`LIGHT_DROPS` are left out, then the point's name becomes its ``NNN`` prefix
    (the swept columns hold the rest of it) with a narrower progress bar, then the columns of
    :data:`HEAVY_DROPS` go. None (output not a terminal): every column, every value whole (the
    reason too)."""
    chained = any("chain" in r.extra for r in rows)  # after=[merge,eval]: the chained job's state

    def columns(short: bool, bar: int) -> list[tuple[str, str, dict, list]]:  # (drop group, header, options, cells)
        cols = [
            ("#", "#", {"justify": "right"}, [str(r.index) for r in rows]),
            ("", "point", {}, [_short_name(r.name) if short else r.name for r in rows]),
            *[
                ("swept", _folded(key.split(".")[-1]), {"justify": "right"}, [str(r.swept.get(key, "")) for r in rows])
                for key in sweep.swept_keys
            ],
            ("", "job", {}, [r.job_id or "-" for r in rows]),
            ("", "state", {}, [Text(r.state, style=STATE_STYLE.get(r.state, "")) for r in rows]),
            ("att", "att", {}, [str(r.attempts) for r in rows]),
            (
                "",
                "step",
                {"justify": "right"},
                [f"{r.step if r.step is not None else '-'}/{r.target_step if r.target_step else '?'}" for r in rows],
            ),
            ("progress", "progress", {}, [ProgressBar(total=1.0, completed=r.fraction, width=bar) for r in rows]),
            ("reward", "reward", {"justify": "right"}, [_num(r.last_reward) for r in rows]),
            ("val acc", "val acc", {"justify": "right"}, [_num(r.val_acc) for r in rows]),
            ("elapsed", "elapsed", {"justify": "right"}, [format_duration(r.elapsed_s) for r in rows]),
            ("ETA", "ETA", {"justify": "right"}, [format_duration(r.eta_s) for r in rows]),
        ]
        if any(startup_s(r) is not None for r in rows):  # the latest attempt's job start -> first generation
            cols.append(("start-up", "start-up", {"justify": "right"}, [_num(startup_s(r), "{:.0f} s") for r in rows]))
        if chained:
            chain_cells = [
                Text(r.extra.get("chain") or "-", style=STATE_STYLE.get(r.extra.get("chain") or "", "")) for r in rows
            ]
            cols.append(("chain", "chain", {}, chain_cells))
        return cols

    def fixed(col) -> int:  # a column's width: its header (its longest line) or its longest value
        if col[0] == "progress":
            return col[3][0].width if col[3] else len(col[1])
        return max([len(line) for line in col[1].splitlines()] + [len(str(c)) for c in col[3]])

    # Each column costs its width + ``per`` (padding, rules), the table ``edge`` more. The ruled
    # box first; when even the kept columns do not fit, a plain one (no rules, no outer padding).
    styles = [(box.HEAVY_HEAD, 3, 1), (None, 2, -2)]
    stages = [(False, 20, LIGHT_DROPS[:k]) for k in range(len(LIGHT_DROPS) + 1)]
    stages += [(True, 8, LIGHT_DROPS + HEAVY_DROPS[:k]) for k in range(len(HEAVY_DROPS) + 1)]
    # Every column kept (the name cut) in a plain box comes before leaving any of HEAVY_DROPS out.
    tries = [(styles[0], st) for st in stages if len(st[2]) <= len(LIGHT_DROPS)] + [(styles[1], st) for st in stages]
    chosen, cols = styles[0], columns(False, 20)
    if width is not None:
        for style, (short, bar, dropped) in tries:
            chosen, cols = style, [c for c in columns(short, bar) if c[0] not in dropped]
            if sum(fixed(c) + style[1] for c in cols) + style[2] + REASON_MIN + style[1] <= width:
                break
    table_box, per, edge = chosen
    rehearsal = " - REHEARSAL: stand-in trainer, made-up metrics" if sweep.rehearsal else ""
    table = Table(
        title=f"sweep {sweep.name} ({len(rows)} points){rehearsal}",
        expand=False,
        box=table_box,
        pad_edge=table_box is not None,
    )
    for col in cols:
        # A set width: rich shrinks only the reason column (no set width) to fit the terminal; a
        # swept key's long name folds in its header.
        _, header, options, _cells = col
        table.add_column(header, no_wrap=True, width=fixed(col), **options)
    if width is not None:
        left = width - sum(fixed(c) + per for c in cols) - edge - per
        table.add_column("reason", min_width=REASON_MIN, max_width=max(REASON_MIN, min(60, left)))
    else:
        table.add_column("reason", no_wrap=True)
    shown = [shown_reason(r.reason, r.state, r.extra.get("chain"), r.extra.get("chain_reason")) for r in rows]
    reasons = [Text(reason.split("\n")[0], no_wrap=True, overflow="ellipsis") for reason in shown]
    for i, reason in enumerate(reasons):
        table.add_row(*[c[3][i] for c in cols], reason)
    return table
