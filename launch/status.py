"""Show a sweep's progress: one row per point (state, attempts, step, reward, accuracy, elapsed).

Usage: python launch/status.py logs/<sweep_name> [--watch [SECONDS]]
Reads only the sweep folder (docs/run-folder.md) and Slurm's client commands.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from grpokit.results.status_table import collect_rows, render_table
from grpokit.results.sweep_folder import load_sweep

log = logging.getLogger(__name__)


def build(sweep_dir: Path):
    sweep = load_sweep(sweep_dir)
    return render_table(sweep, collect_rows(sweep))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, help="sweep folder, logs/<sweep_name>")
    parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=10.0,
        default=None,
        metavar="SECONDS",
        help="refresh every SECONDS (default 10) until Ctrl-C",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=None,
        help="console width (default: the terminal's; 200 when the output is not a terminal)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    width = args.width or (None if sys.stdout.isatty() else 200)
    console = Console(width=width)
    try:
        table = build(args.sweep_dir)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    if args.watch is None:
        console.print(table)
        return 0
    try:
        with Live(table, console=console, refresh_per_second=1, screen=False) as live:
            while True:
                time.sleep(args.watch)
                live.update(build(args.sweep_dir))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
