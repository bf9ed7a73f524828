"""Resubmit a sweep's failed, timed-out and cancelled points; they resume from their checkpoints.

    python launch/resubmit.py logs/<sweep>                       # failed, timeout, cancelled, preempted
    python launch/resubmit.py logs/<sweep> --states timeout      # only those
    python launch/resubmit.py logs/<sweep> --dry-run             # show, submit nothing

Completed, queued and running points are left alone. Works when Slurm accounting (sacct) is off.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from grpokit.submit.resubmit import DEFAULT_STATES, resubmit


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument(
        "--states",
        default=",".join(DEFAULT_STATES),
        help=f"comma-separated states to resubmit (default {','.join(DEFAULT_STATES)})",
    )
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    states = tuple(s.strip() for s in args.states.split(",") if s.strip())
    entries = resubmit(args.sweep_dir, states, dry_run=args.dry_run)
    if not entries:
        print(f"nothing to resubmit in {args.sweep_dir} (states: {', '.join(states)})")
        return 0
    verb = "would resubmit" if args.dry_run else "resubmitted"
    for e in entries:
        print(f"{verb} {e['name']} -> {e.get('job_id') or '(not submitted)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
