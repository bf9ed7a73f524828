"""Show a sweep's progress: one row per point (state, step, reward, accuracy, reason, ETA).

Usage: python launch/status.py logs/<sweep_name> [--watch [SECONDS]] [--json]
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
waiting_rung, nor a chained job). In a terminal, point, job, state and step are never cut, the reason
takes what is left (cut with an ellipsis) and low-value columns (swept values, progress bar, ...)
are left out when narrow; piped (not a terminal), every column and value is printed whole.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from grpokit.reports.status_table import collect_rows, render_table, row_json
from grpokit.run_folder.locate import sweep_folder_arg
from grpokit.run_folder.sweep_reader import load_sweep

log = logging.getLogger(__name__)

PIPED_WIDTH = 100_000  # columns of the console when stdout is not a terminal: nothing is cut


#: Status words after which a point may still change by itself (a live job, a halving rung being
#: ranked); ``--watch`` ends once no point (nor its chained job) is in one.
LIVE_WORDS = frozenset({"queued", "running", "waiting_rung"})


def build(sweep_dir: Path, width: int | None = None):
    """The table for a terminal of ``width`` columns (None: not a terminal, every value whole), and
    whether every point is final (none in :data:`LIVE_WORDS`, nor its chained job)."""
    sweep = load_sweep(sweep_dir)
    rows = collect_rows(sweep)
    final = not any(r.state in LIVE_WORDS or r.extra.get("chain") in LIVE_WORDS for r in rows)
    return render_table(sweep, rows, width), final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=sweep_folder_arg, help="sweep folder (logs/<sweep_name>) or the sweep's name")
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

    if args.json:
        try:
            rows = collect_rows(load_sweep(args.sweep_dir))
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps([row_json(r) for r in rows], indent=2, default=str))
        return 0
    try:
        table, final = build(args.sweep_dir, table_width())
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    if args.watch is None:
        console.print(table)
        return 0
    try:
        with Live(table, console=console, refresh_per_second=1, screen=False) as live:
            while not final:
                time.sleep(args.watch)
                table, final = build(args.sweep_dir, table_width())
                live.update(table)
    except KeyboardInterrupt:
        return 0
    console.print("every point is final")
    return 0


def entry(argv: list[str] | None = None) -> int:
    """``grpokit status ...`` / ``python launch/status.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
