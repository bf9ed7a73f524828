"""Collect and compare a sweep: one table (CSV + Markdown) and PNG plots.

Usage: python launch/report.py logs/<sweep_name> [--out DIR] [--heatmap KEY_X KEY_Y] [--no-slurm]
Writes DIR/report.csv, DIR/report.md, DIR/curves.png and DIR/heatmap.png (DIR defaults to
<sweep>/report) and prints one TensorBoard command for the whole sweep.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from grpokit.reports.plots import plot_curves, plot_heatmap
from grpokit.reports.report_table import collect_report, tensorboard_command, write_tables
from grpokit.run_folder.locate import sweep_folder_arg
from grpokit.run_folder.sweep_reader import load_sweep
from grpokit.submit import no_space

log = logging.getLogger(__name__)

#: About the bytes a report writes (two tables, two PNG plots), for the line a full disk leaves.
REPORT_BYTES = 1_000_000


def run(
    sweep_dir: Path,
    out: Path | None = None,
    heatmap: list[str] | None = None,
    ask_slurm: bool = True,
    plots: bool = True,
) -> dict[str, Path | None]:
    """Write the report files; returns {"csv", "md", "curves", "heatmap"} -> path (None if skipped).

    heatmap: two swept keys (x, y); default the sweep's first two swept keys. Raises ValueError for
    an unknown key.
    """
    sweep = load_sweep(sweep_dir)
    out = out or sweep.path / "report"
    report = collect_report(sweep, ask_slurm=ask_slurm)
    csv_path, md_path = write_tables(report, out)
    paths: dict[str, Path | None] = {"csv": csv_path, "md": md_path, "curves": None, "heatmap": None}
    if plots:
        paths["curves"] = plot_curves(report, out / "curves.png")
        axes = heatmap or sweep.swept_keys[:2]
        if len(axes) == 2:
            unknown = [k for k in axes if k not in sweep.swept_keys]
            if unknown:
                raise ValueError(f"--heatmap {unknown}: not swept keys; the swept keys are {sweep.swept_keys}")
            paths["heatmap"] = plot_heatmap(report, out / "heatmap.png", axes[0], axes[1])
        else:
            log.warning("heatmap needs two swept keys; this sweep has %s", sweep.swept_keys)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=sweep_folder_arg, help="sweep folder (logs/<sweep_name>) or the sweep's name")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default <sweep>/report)")
    parser.add_argument(
        "--heatmap",
        nargs=2,
        metavar=("KEY_X", "KEY_Y"),
        default=None,
        help="two swept keys for the final-accuracy heatmap (default: the first two)",
    )
    parser.add_argument("--no-slurm", action="store_true", help="do not ask Slurm; states from status.json")
    parser.add_argument("--no-plots", action="store_true", help="tables only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        paths = run(args.sweep_dir, args.out, args.heatmap, ask_slurm=not args.no_slurm, plots=not args.no_plots)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if not no_space.is_full(exc):
            raise
        out = args.out or args.sweep_dir / "report"
        print(
            f"error: disk full writing the report into {out} ({no_space.human(no_space.free_bytes(out))} free, "
            f"about {no_space.human(REPORT_BYTES)} needed); free space there or pass --out DIR on another disk, "
            "then run the same command again",
            file=sys.stderr,
        )
        return 1
    for kind, path in paths.items():
        if path is not None:
            print(f"{kind}: {path}")
    print("TensorBoard for the whole sweep:")
    print(f"  {tensorboard_command(load_sweep(args.sweep_dir))}")
    return 0


def entry(argv: list[str] | None = None) -> int:
    """``grpokit report ...`` / ``python launch/report.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
