"""Resubmit the points of a sweep that failed, timed out, were cancelled or preempted, or ran on a node
without a GPU (``skipped_no_gpu``), into their own run folders.

A point's state comes from Slurm (squeue/scontrol, ``sacct`` only when accounting works) and from
its ``status.json``; a point still queued or running, or completed, is never touched. The
resubmitted job runs the same point spec (``<run>/point.json``), so the in-job driver opens the next
attempt in the same run folder and verl resumes from the last complete checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from grpokit.config.point import PointSpec
from grpokit.run_folder import RunFolder, read_status_or_none
from grpokit.run_folder.claim import Claim, folder_state, open_existing
from grpokit.run_folder.manifest import ManifestPoint, read_manifest, replace_job_ids
from grpokit.run_folder.point_state import RESUBMITTABLE_STATES, point_state
from grpokit.run_folder.sweep_reader import load_sweep, moved_line
from grpokit.runtime.decisions import resubmission
from grpokit.slurm.job_states import job_states
from grpokit.slurm.scancel import scancel
from grpokit.submit import no_space
from grpokit.submit.backends import executor_for

log = logging.getLogger(__name__)

#: The states resubmitted by default: the ones ``resume=true`` takes again too.
DEFAULT_STATES = RESUBMITTABLE_STATES


class FoldersMissing(Exception):
    """The sweep folder was moved, or run folders of points to resubmit are gone; one line, what to do."""


def check_folders(sweep_dir: Path, chosen: list[tuple[int, str]]) -> None:
    """Refuse a resubmission that cannot find its points' files (each job reads ``<run>/point.json``).

    Raises:
        FoldersMissing: the sweep folder was moved from where it was submitted, or a chosen point's
            run folder is missing (deleted or moved away).
    """
    sweep = load_sweep(sweep_dir)
    moved = moved_line(sweep)
    if moved:
        raise FoldersMissing(f"nothing was resubmitted: {moved}")
    wanted = {i for i, _ in chosen}
    gone = [p for p in sweep.points if p.index in wanted and p.missing]
    if gone:
        names = ", ".join(f"{p.name} ({p.run_dir})" for p in gone)
        raise FoldersMissing(
            f"nothing was resubmitted: the run folder of {names} is missing (deleted or moved away) and a "
            "resubmitted job reads its point.json there; move it back (a deleted point can only be trained again in a "
            "new sweep)"
        )


def select(sweep_dir: Path, states: tuple[str, ...] = DEFAULT_STATES) -> list[tuple[int, str]]:
    """``(point index, state)`` of the points to resubmit."""
    sweep = load_sweep(sweep_dir)
    ids = [p.job_id for p in sweep.points if p.job_id]
    slurm_view = job_states(ids) if ids else {}
    chosen = []
    for p in sweep.points:
        state = point_state(p, slurm_view.get(p.job_id) if p.job_id else None)
        if state in states:
            chosen.append((p.index, state))
    return chosen


@dataclasses.dataclass
class Resubmission:
    """What :func:`resubmit` did.

    Attributes:
        entries: the manifest entries resubmitted (with their new ``job_id``; None for a local sweep).
        failed_here: ``cluster.kind: local``: ``name (state): first line of its reason`` of each
            point run on this machine whose driver exited non-zero (failed, cancelled); empty otherwise.
    """

    entries: list[ManifestPoint]
    failed_here: list[str] = dataclasses.field(default_factory=list)


def failed_here(ran: list[tuple[PointSpec, int]]) -> list[str]:
    """``name (state): first line of its reason`` of each point run here whose driver exited non-zero
    (its ``status.json``; ``no status.json`` when the driver wrote none); ``ran``: ``(point, exit
    status)`` pairs (:meth:`grpokit.submit.backends.Executor.run_pending`)."""
    out = []
    for spec, code in ran:
        if code == 0:
            continue
        status = read_status_or_none(spec.run_dir)
        if status is None:
            out.append(f"{spec.name} (no status.json): the driver wrote none")
            continue
        reason = (str(status.reason or "").strip().splitlines() or ["no reason recorded"])[0]
        out.append(f"{spec.name} ({status.state}): {reason}")
    return out


def resubmit(sweep_dir: Path, states: tuple[str, ...] = DEFAULT_STATES, dry_run: bool = False) -> Resubmission:
    """Resubmit the selected points as one job array (or run them here for a local sweep).

    Raises:
        FoldersMissing: the sweep folder was moved, or a chosen point's run folder is gone.
        grpokit.submit.no_space.NoSpace: the disk was full (or over quota) writing the sweep folder;
            what this resubmission wrote is undone first (``exc.undone`` says what), nothing is queued.
    """
    sweep_dir = Path(sweep_dir)
    read_manifest(sweep_dir)  # its clear error when the folder is not a sweep folder
    if folder_state(sweep_dir) == "free":
        return []  # a dry run's folder: nothing was submitted there (and it stays free for the real run)
    # Locked like a resume (grpokit.run_folder.claim): two resubmissions never submit a point twice.
    with open_existing(sweep_dir) as claim:
        undo = no_space.Undo.of_claim(claim)
        try:
            return _resubmit_locked(claim, states, dry_run, undo)
        except no_space.NoSpace as exc:  # a full disk: what this resubmission wrote is undone
            exc.undone = undo.run()
            exc.free = no_space.free_bytes(exc.folder)
            raise


def _resubmit_locked(claim: Claim, states: tuple[str, ...], dry_run: bool, undo: no_space.Undo) -> Resubmission:
    sweep_dir = claim.path
    manifest = read_manifest(sweep_dir)
    picked = select(sweep_dir, states)
    check_folders(sweep_dir, picked)
    chosen = dict(picked)
    entries = [p for p in manifest.points if p.index in chosen]
    if not entries or dry_run:
        return Resubmission(entries)
    specs = [PointSpec.from_json(RunFolder(p.run_dir).point.read_text()) for p in entries]
    _, changed = submit_again(claim, specs, chosen, how="resubmit", undo=undo)
    return Resubmission(changed, failed_here(executor_for(specs[0].cluster).run_pending(specs)))


def submit_again(
    claim: Claim, specs: list[PointSpec], replaced: dict[int, str], *, how: str, undo: no_space.Undo | None = None
) -> tuple[list[str | None], list[ManifestPoint]]:
    """Submit points of an existing sweep again: the one path of ``resume=true`` and ``grpokit resubmit``.

    Each point gets the permission to run again (``resubmission.json``: its driver refuses a final
    point otherwise), then goes out as the sweep submits (:func:`grpokit.submit.dispatch.submit_slurm`:
    arrays of at most ``MaxArraySize``; a refusal is one line and exit 2, the folder unchanged). The
    manifest records the new ids with the replaced ones in each entry's ``history``, and
    ``submissions.jsonl`` one line (``how``, the points, their ids, what each replaced). A local
    sweep's points are not run here: the caller runs them (the executor's ``run_pending``).

    Args:
        claim: the sweep folder, held (``open_existing``).
        specs: the points, in the order submitted.
        replaced: ``{point index: the state it is resubmitted from}`` for every point of ``specs``.
        how: ``"resume"`` or ``"resubmit"`` (the submissions.jsonl kind).
        undo: told each ``resubmit.json`` before it is written, so a full disk puts them back.

    Returns:
        Each point's new Slurm id (None for a local sweep), and the manifest entries changed.

    Raises:
        grpokit.submit.no_space.NoSpace: a write found the disk full; jobs already queued are cancelled.
    """
    sweep_dir = claim.path
    undo = undo or no_space.Undo()
    with no_space.writing(sweep_dir, f"resubmit.json of {len(specs)} point(s)", no_space.BLOCK * len(specs)):
        for spec in specs:
            undo.keep(RunFolder(spec.run_dir).resubmit)
            resubmission.request(Path(spec.run_dir))
    job_ids = executor_for(specs[0].cluster).submit(sweep_dir, specs)  # None each: run here by the caller
    manifest = read_manifest(sweep_dir)
    changed = replace_job_ids(manifest, {s.index: (j, replaced[s.index]) for s, j in zip(specs, job_ids, strict=True)})
    undo.keep(sweep_dir / "manifest.json")
    try:
        with no_space.writing(sweep_dir, "manifest.json", (sweep_dir / "manifest.json").stat().st_size):
            manifest.write(sweep_dir)
        with no_space.writing(sweep_dir, "submissions.jsonl", no_space.BLOCK):
            claim.record(how, [s.name for s in specs], job_ids, replaced={s.name: replaced[s.index] for s in specs})
    except no_space.NoSpace as exc:  # the jobs are queued but unrecorded: cancelled (the manifest is unchanged)
        said = scancel([str(j) for j in job_ids if j])
        if any(job_ids):
            exc.what += "; its new jobs were cancelled" if said is None else f"; scancel: {said}"
        raise
    return job_ids, changed
