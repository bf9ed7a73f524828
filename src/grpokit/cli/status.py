"""Show a sweep's progress: one row per point (state, step, reward, accuracy, reason, ETA).

Usage: python launch/status.py logs/<sweep_name> [--watch [SECONDS]] [--json]
       python launch/status.py logs/<sweep_name>/<NNN_point>   # that point's row only
Reads only the sweep folder (docs/run-folder.md) and Slurm's client commands. The state a job
recorded for itself (status.json) wins over Slurm's final word (a job that skipped training exits 0
and is shown skipped_no_gpu, not completed); the table shows the first line of status.json's
reason, --json all of it. Under successive halving a point that trained to a rung shows
waiting_rung until the controller ranks the rung.
--json prints a JSON list, one object per point: index, name, swept, job_id, state, reason,
attempts, step, target_step, last_reward, val_acc, elapsed_s, eta_s (null when unknown), rehearsal.
Each row has a progress bar (steps done / target) and, for a running point, its ETA: the steps left
times the median of verl's measured ``timing_s/step`` over its last 5 steps. --watch redraws the
table in place every SECONDS and ends once every point is final (none queued, running or
waiting_rung, nor a chained job), with the line "every point is final"; piped, each refresh's
table is printed (and flushed) as it comes, one after another. In a terminal, point, job, state
and step are never cut, the reason takes what is left (cut with an ellipsis) and low-value columns
(swept values, progress bar, ...) are left out when narrow; piped (not a terminal), every column
and value is printed whole. A point's run folder (``logs/<sweep>/<NNN_point>``, holding point.json
or status.json) shows that point's row of its sweep.
Slurm is given 3 s in all: when slurmctld does not answer, the rows come from the run folders and a
line under the table (on stderr with --json) says since when Slurm has not answered
(<sweep>/slurm_unanswered.json keeps the first unanswered ask).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from grpokit.paths import kit_command
from grpokit.reports.status_table import collect_rows, render_table, row_json
from grpokit.run_folder.layout import POINT, STATUS
from grpokit.run_folder.locate import point_of, sweep_folder_arg
from grpokit.run_folder.sweep_reader import Sweep, load_sweep, moved_line

log = logging.getLogger(__name__)

PIPED_WIDTH = 100_000  # columns of the console when stdout is not a terminal: nothing is cut


#: Status words after which a point may still change by itself (a live job, a halving rung being
#: ranked); ``--watch`` ends once no point (nor its chained job) is in one.
LIVE_WORDS = frozenset({"queued", "running", "waiting_rung"})


def load(sweep_dir: Path, point: str | None = None) -> Sweep:
    """The sweep, or only its point whose run folder is named ``point`` (:meth:`Sweep.only`).

    Raises:
        FileNotFoundError, ValueError: as :func:`grpokit.run_folder.sweep_reader.load_sweep`; no such point.
    """
    sweep = load_sweep(sweep_dir)
    return sweep.only(point) if point is not None else sweep


def sweep_and_point(path: Path) -> tuple[Path, str | None]:
    """What ``grpokit status PATH`` shows: ``(sweep folder, None)`` for a sweep folder, ``(its sweep
    folder, point)`` for a point's run folder (:func:`grpokit.run_folder.locate.point_of`).

    Raises:
        FileNotFoundError: ``path`` is a run folder outside a sweep folder (its parent holds no
            manifest.json); the message says which folder to pass.
    """
    found = point_of(path)
    if found is not None:
        return found
    if (Path(path) / POINT).exists() or (Path(path) / STATUS).exists():
        raise FileNotFoundError(
            f"{path} is a point's run folder, but {Path(path).resolve().parent} holds no manifest.json: "
            "pass the sweep folder the point was submitted in (logs/<sweep_name>)"
        )
    return Path(path), None


def build(sweep_dir: Path, width: int | None = None, point: str | None = None):
    """The table for a terminal of ``width`` columns (None: not a terminal, every value whole), with
    the line saying since when Slurm has not answered under it when it did not, and whether every
    point is final (none in :data:`LIVE_WORDS`, nor its chained job). ``point``: only the point
    whose run folder has that name."""
    sweep = load(sweep_dir, point)
    notes: list[str] = []
    rows = collect_rows(sweep, notes=notes)
    final = not any(r.state in LIVE_WORDS or r.extra.get("chain") in LIVE_WORDS for r in rows)
    table = render_table(sweep, rows, width)
    return (Group(table, *(Text(n, style="yellow") for n in notes)) if notes else table), final


def _moved(sweep_dir: Path) -> str | None:
    """:func:`~grpokit.run_folder.sweep_reader.moved_line` of the sweep (None also when it cannot be read:
    the table's own error says why)."""
    try:
        return moved_line(load_sweep(sweep_dir))
    except (FileNotFoundError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "sweep_dir",
        type=sweep_folder_arg,
        help="sweep folder (logs/<sweep_name>) or the sweep's name; a point's run folder shows that point only",
    )
    parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=10.0,
        default=None,
        metavar="SECONDS",
        help="refresh every SECONDS (default 10) until every point is final (or Ctrl-C)",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=None,
        help="console width (default: the terminal's; when the output is not a terminal, every value whole)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list instead of a table")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    piped = args.width is None and not sys.stdout.isatty()
    # Piped: a console wide enough for any row (rich prints only the table's own width).
    console = Console(width=PIPED_WIDTH if piped else args.width)

    def table_width() -> int | None:  # read again at each redraw: the terminal may be resized
        return None if piped else console.width

    try:
        sweep_dir, point = sweep_and_point(args.sweep_dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    moved = _moved(sweep_dir)
    if moved:  # the table still shows the points, read where they are now
        print(f"warning: {moved}", file=sys.stderr)
    if args.json:
        notes: list[str] = []
        try:
            rows = collect_rows(load(sweep_dir, point), notes=notes)
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps([row_json(r) for r in rows], indent=2, default=str))
        for note in notes:  # stderr: stdout stays one JSON list
            print(note, file=sys.stderr)
        return 0
    try:
        table, final = build(sweep_dir, table_width(), point)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    if point is not None:
        console.print(f"point {point} of sweep {sweep_dir}; every point: {kit_command('status', str(sweep_dir))}")
    if args.watch is None:
        console.print(table)
        return 0
    try:
        if piped:  # rich's Live draws nothing until it stops when the output is not a terminal
            show(console, table)
            while not final:
                time.sleep(args.watch)
                table, final = build(sweep_dir, None, point)
                show(console, table)
        else:
            with Live(table, console=console, refresh_per_second=1, screen=False) as live:
                while not final:
                    time.sleep(args.watch)
                    table, final = build(sweep_dir, table_width(), point)
                    live.update(table)
    except KeyboardInterrupt:
        return 0
    show(console, "every point is final")
    return 0


def show(console: Console, what) -> None:
    """Print ``what`` (a table or a line) on lines of its own and flush: a pipe's reader sees each
    refresh as it is drawn."""
    console.print(what)
    console.file.flush()


def entry(argv: list[str] | None = None) -> int:
    """``grpokit status ...`` / ``python launch/status.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
