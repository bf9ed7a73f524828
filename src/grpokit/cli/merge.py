"""Merge a run's FSDP checkpoint into <run folder>/hf/ with verl's model merger.

Usage: python launch/merge.py logs/<sweep>/<NNN>_<slug> [--step N] [--overwrite] [--dry-run]
Default: the latest complete checkpoint; an incomplete one is refused with what is missing. A sweep
folder is refused with a point folder to pass instead. ``hf/`` holding a model already is kept
unless --overwrite (verl's merger then writes its files over it). --dry-run runs nothing: it says
what the merge would do (an ``hf/`` already there included), then prints the merger's command. A
failure is one line naming the checkpoint and the cause; the merger's whole output is in
<run folder>/merge.log.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from grpokit.evaluation.model_merge import (
    CheckpointError,
    MergeError,
    SweepFolderGiven,
    last_line,
    merge_run,
    plan_merge,
)

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="run folder, logs/<sweep>/<NNN>_<slug>")
    parser.add_argument("--step", type=int, default=None, help="global step to merge (default: latest complete)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing <run>/hf")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="say what the merge would do (hf/ kept or written over) and print the merger's command; run nothing",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.dry_run:
            plan = plan_merge(args.run_dir, args.step)
            print(f"dry run: {plan.describe(args.overwrite)}; the merger's command:")
            print(shlex.join(plan.argv))
            return 0
        cmd = merge_run(args.run_dir, args.step, overwrite=args.overwrite)
    except (CheckpointError, SweepFolderGiven, FileExistsError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MergeError as exc:  # one line: the checkpoint, the merger's exception, its log (never its traceback)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # anything else still one line, naming the run folder
        print(f"error: merging {args.run_dir} failed: {type(exc).__name__}: {last_line(str(exc))}", file=sys.stderr)
        return 1
    print(shlex.join(cmd))
    return 0


def entry(argv: list[str] | None = None) -> int:
    """``grpokit merge ...`` / ``python launch/merge.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
