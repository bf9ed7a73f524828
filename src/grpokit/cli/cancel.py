"""Cancel a sweep's queued and running points (``scancel`` by the job ids its manifest records).

    grpokit cancel logs/<sweep>                 # every queued or running point
    grpokit cancel logs/<sweep> 0 3 005_n-8     # these points (index, name or NNN prefix)
    grpokit cancel logs/<sweep> --dry-run       # say what would be cancelled

A running point's driver gets Slurm's SIGTERM and records ``cancelled`` in its ``status.json``
itself; a point cancelled before its job started gets a ``status.json`` saying ``cancelled`` (by
this command, no attempt). The cancellation is one line of the sweep's ``submissions.jsonl``
(``"kind": "cancel"``). Points already final are left alone. Cancelling every point also cancels
the sweep's pending successive-halving controller (``halving.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from pathlib import Path

from grpokit.run_folder import PointStatus, RunFolder, now, write_status
from grpokit.run_folder.claim import folder_state, open_existing
from grpokit.run_folder.halving_record import HalvingRecordError, read_halving
from grpokit.run_folder.locate import sweep_folder_arg
from grpokit.run_folder.point_state import point_state
from grpokit.run_folder.sweep_reader import load_sweep
from grpokit.slurm.job_states import job_states
from grpokit.slurm.scancel import scancel

log = logging.getLogger(__name__)

LIVE = ("queued", "running")


def choose(sweep, wanted: list[str]) -> tuple[list, list[str]]:
    """The sweep's points named by ``wanted`` (all when empty), and the names not found."""
    if not wanted:
        return list(sweep.points), []
    chosen, missing = [], []
    for w in wanted:
        match = [
            p for p in sweep.points if w == p.name or (w.isdigit() and int(w) == p.index) or p.name.startswith(w + "_")
        ]
        if match:
            chosen += [m for m in match if m not in chosen]
        else:
            missing.append(w)
    return chosen, missing


def nothing_live(count: int, named: bool) -> str:
    """Why nothing is cancelled: no point of the ``count`` chosen is queued or running (``named``:
    the user named them; else they are the whole sweep)."""
    if named:
        return f"none of the {count} point(s) named is queued or running"
    return f"none of the sweep's {count} point(s) is queued or running"


def _halving_controllers(sweep_dir: Path) -> list[str]:
    """The sweep's pending halving controllers (``halving.json``); none, with a warning, when that
    file cannot be read (the points are still cancelled)."""
    try:
        record = read_halving(sweep_dir)
    except HalvingRecordError as exc:
        print(f"warning: {exc}; its halving controllers are not cancelled (scancel them by hand)", file=sys.stderr)
        return []
    return record.pending_controllers() if record is not None else []


def cancel(sweep_dir: Path, wanted: list[str], dry_run: bool = False, out=sys.stdout) -> int:
    sweep_dir = Path(sweep_dir)
    sweep = load_sweep(sweep_dir)
    chosen, missing = choose(sweep, wanted)
    if missing:
        names = ", ".join(p.name for p in sweep.points[:10])
        print(f"error: no point {', '.join(map(repr, missing))} in {sweep_dir}; its points: {names}", file=sys.stderr)
        return 2
    slurm = job_states([p.job_id for p in chosen if p.job_id])
    live = [(p, point_state(p, slurm.get(p.job_id) if p.job_id else None)) for p in chosen]
    todo = [(p, s) for p, s in live if s in LIVE and p.job_id]
    left = [(p, s) for p, s in live if (p, s) not in todo]
    controllers = _halving_controllers(sweep_dir) if not wanted else []
    if not todo and not controllers:
        print(f"nothing to cancel in {sweep_dir}: {nothing_live(len(chosen), named=bool(wanted))}", file=out)
        return 0
    for p, s in todo:
        print(f"{'would cancel' if dry_run else 'cancel'} {p.name} ({s}, job {p.job_id})", file=out)
    for c in controllers:
        print(f"{'would cancel' if dry_run else 'cancel'} successive-halving controller job {c}", file=out)
    if left:
        print("left alone: " + ", ".join(f"{p.name} ({s})" for p, s in left), file=out)
    if dry_run or folder_state(sweep_dir) != "sweep":
        return 0
    ids = [p.job_id for p, _ in todo] + controllers
    with open_existing(sweep_dir) as claim:
        said = scancel(ids)
        if said:
            log.warning("scancel said: %s", said)
        claim.record("cancel", [p.name for p, _ in todo], ids, by="user")
    time.sleep(1.0)  # Slurm has removed a pending task from the queue by now
    for p, state in todo:
        if state != "queued" or RunFolder(p.run_dir).status.exists():
            continue  # a driver ran: it writes the outcome
        reason = f"cancelled by user before it started (grpokit cancel, job {p.job_id})"
        # only while no status.json exists: a driver that started meanwhile keeps its own file
        with contextlib.suppress(FileExistsError):
            write_status(p.run_dir, PointStatus(state="cancelled", reason=reason, updated=now()), exclusive=True)
    print(f"cancelled {len(todo)} point(s); recorded in {sweep_dir / 'submissions.jsonl'}", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=sweep_folder_arg, help="sweep folder (logs/<sweep_name>) or the sweep's name")
    parser.add_argument("points", nargs="*", help="points by index, name or NNN prefix (default: all)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be cancelled; cancel nothing")
    args = parser.parse_args(argv)
    try:
        return cancel(args.sweep_dir, args.points, args.dry_run)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def entry(argv: list[str] | None = None) -> int:
    """``grpokit cancel ...`` / ``python launch/cancel.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
