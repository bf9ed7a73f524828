"""Resubmit a sweep's points that did not finish; they resume from their checkpoints.

The states taken again by default: failed, timeout, cancelled, preempted and skipped_no_gpu (the
states ``resume=true`` takes again too).

    python launch/resubmit.py logs/<sweep>                       # failed, timeout, cancelled, preempted, skipped_no_gpu
    python launch/resubmit.py logs/<sweep> --states timeout      # only those
    python launch/resubmit.py logs/<sweep> --dry-run             # show, submit nothing

Completed, pruned, queued and running points are left alone. Works when Slurm accounting (sacct) is off.
A local sweep's points (``cluster=local``) run here, one after another: the command exits 1 when
one of them did not succeed, naming it, its state and the first line of its reason.
"""

from __future__ import annotations

import argparse
import logging
import sys

from grpokit.run_folder.locate import sweep_folder_arg
from grpokit.run_folder.sweep_reader import load_sweep
from grpokit.submit import no_space
from grpokit.submit.resubmit_points import DEFAULT_STATES, FoldersMissing, check_folders, resubmit, select


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=sweep_folder_arg, help="sweep folder (logs/<sweep_name>) or the sweep's name")
    parser.add_argument(
        "--states",
        default=",".join(DEFAULT_STATES),
        help=f"comma-separated states to resubmit (default {','.join(DEFAULT_STATES)})",
    )
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    states = tuple(s.strip() for s in args.states.split(",") if s.strip())
    refused = states_problem(states)
    if refused:
        parser.error(refused)
    if args.dry_run:
        chosen = dict(select(args.sweep_dir, states))
        try:
            check_folders(args.sweep_dir, list(chosen.items()))
        except FoldersMissing as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        done = resubmit(args.sweep_dir, states, dry_run=args.dry_run)
    except FoldersMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except no_space.NoSpace as exc:
        print(
            f"error: {exc.describe()}; nothing was resubmitted ({getattr(exc, 'undone', 'nothing was left behind')}). "
            f"Free at least {no_space.human(exc.needed)} under {exc.folder} and run the same command again.",
            file=sys.stderr,
        )
        return 1
    entries = done.entries
    if not entries:
        gone = [f"{p.name} ({p.run_dir})" for p in load_sweep(args.sweep_dir).points if p.missing]
        note = f"; the run folder of {', '.join(gone)} is missing (deleted or moved away)" if gone else ""
        print(f"nothing to resubmit in {args.sweep_dir} (states: {', '.join(states)}){note}")
        return 0
    for e in entries:
        if args.dry_run:
            old = e.job_id or "never submitted"
            print(f"would resubmit {e.name} ({chosen.get(e.index, '?')}, was {old}) as a task of a new array")
        else:
            last = e.history[-1] if e.history else None
            old = (last.job_id if last else None) or "never submitted"
            state = last.state if last else "?"
            print(f"resubmitted {e.name} ({state}, was {old}) -> {e.job_id or 'ran here'}")
    if done.failed_here:  # cluster=local: the points ran here, and these did not end well
        print(
            f"error: {len(done.failed_here)} point(s) run here did not succeed: {'; '.join(done.failed_here)} "
            f"(see each run folder's status.json and driver.log)",
            file=sys.stderr,
        )
        return 1
    return 0


#: What each state that cannot be resubmitted is, for the refusal.
NOT_RESUBMITTABLE = {
    "completed": "a completed point is final (it reached its target step)",
    "pruned": "a pruned point was stopped on purpose (runtime.pruning or successive halving)",
    "queued": "a queued point is still Slurm's",
    "running": "a running point is still Slurm's",
    "not submitted": "a point never submitted is the sweep's (sweep.py ... resume=true submits it)",
    "unknown": "an unknown outcome is not a failure (read the run folder's status.json)",
}


def states_problem(states: tuple[str, ...]) -> str | None:
    """One line refusing ``--states`` that are not resubmittable (final, live or unknown words)."""
    if not states:
        return f"--states is empty; choose from {', '.join(DEFAULT_STATES)}"
    for state in states:
        if state in DEFAULT_STATES:
            continue
        why = NOT_RESUBMITTABLE.get(state)
        if why:
            return f"--states {state}: {why}; resubmit accepts {', '.join(DEFAULT_STATES)}"
        return f"--states {state}: no such state; resubmit accepts {', '.join(DEFAULT_STATES)}"
    return None


def entry(argv: list[str] | None = None) -> int:
    """``grpokit resubmit ...`` / ``python launch/resubmit.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
