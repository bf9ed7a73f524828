"""The sweep command's stages: plan (grpokit.submit.points) -> validate (grpokit.validate) -> claim the
sweep folder (grpokit.run_folder.claim) -> dry run | submit one Slurm array | run locally
(grpokit.submit.dispatch) -> manifest; with resume=true, halving and wait=true."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from grpokit.config.point import PointSpec, kit_notices
from grpokit.paths import kit_command
from grpokit.run_folder import RunFolder, read_status_or_none
from grpokit.run_folder.claim import (
    Claim,
    SweepFolderError,
    check_before_validation,
    check_name,
    dry_run_folder,
    folder_state,
    is_generated,
)
from grpokit.run_folder.claim import claim as claim_folder
from grpokit.run_folder.manifest import read_manifest, write_manifest
from grpokit.slurm.scancel import scancel
from grpokit.submit import chain, halving, halving_controller, no_space, repeats, snapshot
from grpokit.submit import sweep_resume as resume_mod
from grpokit.submit.backends import executor_for
from grpokit.submit.dispatch import arrays_phrase, check_picklable, write_dry_run
from grpokit.submit.dry_run_summary import dry_run_summary
from grpokit.submit.points import build_points, point_loader, swept_keys
from grpokit.submit.provenance import sweep_sources
from grpokit.submit.wait import attempt_counts, wait_for
from grpokit.validate import SweepValidationError, overlap, validate_points

log = logging.getLogger(__name__)

#: The sweep folder whose points are being submitted (or run here); None before (a Ctrl-C then
#: leaves nothing behind: ``grpokit.cli`` says so).
submitting_into: Path | None = None


def sweep_options(first: DictConfig, job_overrides: list[list[str]]) -> dict[str, Any]:
    """The command's folder settings from the first point's config: ``name`` (resolved once),
    ``generated`` (the time-stamped default), ``resume``, ``dry_run``, ``wait``, ``logs_root``.

    Raises:
        SweepFolderError: one of these keys is swept (one sweep command makes one sweep folder).
    """
    swept = [k for k in swept_keys(job_overrides) if k in _COMMAND_KEYS]
    if swept:
        raise SweepFolderError(
            f"{swept[0]} is swept, but one sweep command makes one sweep folder; nothing was submitted. "
            f"Give {swept[0]} one value (run one command per value)."
        )
    # unresolved: is it the ${now:...} default?
    raw = OmegaConf.to_container(OmegaConf.masked_copy(first, "sweep_name"), resolve=False)["sweep_name"]
    return {
        "name": str(first.sweep_name),
        "generated": is_generated(str(raw)),
        "resume": bool(first.resume),
        "dry_run": bool(first.dry_run),
        "wait": bool(first.wait),
        "logs_root": Path(str(first.logs_root)),
    }


# One value per sweep command: the folder settings, and use_live_code (one code snapshot per sweep folder).
_COMMAND_KEYS = ("sweep_name", "resume", "dry_run", "wait", "logs_root", "use_live_code", "rehearse")


def _refuse(message: str, code: int = 2) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(code)


def launch_sweep(
    config: DictConfig, hydra_context, job_overrides: list[list[str]], first_index: int
) -> list[JobReturn]:
    """The launcher's body (see :mod:`hydra_plugins.grpokit_launcher.grpokit_launcher`)."""
    if not job_overrides:  # a sweep value the command-line check could not see was empty
        _refuse(
            "the sweep has no points (a swept key has no values, e.g. range(8,8)); nothing was submitted. "
            "Give every swept key at least one value."
        )
    load = point_loader(lambda o: hydra_context.config_loader.load_sweep_config(config, list(o)), job_overrides[0])

    started = time.monotonic()
    first = load(job_overrides[0])
    try:
        opts = sweep_options(first, job_overrides)
        check_name(opts["name"])
        check_before_validation(opts["logs_root"] / opts["name"], resume=opts["resume"], generated=opts["generated"])
    except SweepFolderError as exc:
        _refuse(str(exc))
    # Each point goes to the forked validator as soon as it is built, unless successive halving
    # will change the points first (their targets become the first rung).
    stream = overlap.feed if not halving.requested(first.get("halving")) else None
    specs = build_points(config, load, job_overrides, first_index, name=opts["name"], on_point=stream)
    try:  # successive halving (halving.rungs): every point's first target is the first rung
        plan = halving.plan_of(first.get("halving"), specs, swept_keys(job_overrides), opts)
    except halving.HalvingError as exc:
        _refuse(str(exc))
    specs = halving.at_first_rung(specs, plan)
    try:  # after=[merge,eval]: a job chained after each point (grpokit.submit.chain)
        chained = chain.plan_of(first.get("after"), first.get("chain"), specs, swept_keys(job_overrides), bool(plan))
    except chain.ChainError as exc:
        _refuse(str(exc))
    if opts["resume"] and folder_state(opts["logs_root"] / opts["name"]) == "sweep":
        _check_resume(opts["logs_root"] / opts["name"], specs)  # a changed value: refused before validating
    try:
        validate_points(specs)
        check_picklable(specs)
    except SweepValidationError as exc:
        print(str(exc), file=sys.stderr)
        raise SystemExit(2) from None
    log.info("validated %d point(s) in %.1f s", len(specs), time.monotonic() - started)
    cluster = specs[0].cluster  # typed: grpokit.config.schema.ClusterConf
    keys = swept_keys(job_overrides)
    meta = {"experiment": str(first.experiment.name), "cluster": str(cluster.kind), "swept_keys": keys}

    def rebuild(name: str) -> list[PointSpec]:
        log.info("sweep folder %s was taken; this sweep is %s", opts["name"], name)
        return halving.at_first_rung(build_points(config, load, job_overrides, first_index, name=name), plan)

    if opts["dry_run"]:
        return dry_run(opts, specs, cluster, meta, rebuild)
    for notice in kit_notices(specs):  # what the kit changed on its own, once per sweep (dry_run.md has it too)
        print(f"note: {notice}")
    if not opts["resume"]:  # the same command typed twice: say where those points already are
        for repeat in repeats.earlier_sweeps(opts["logs_root"], meta["experiment"], [s.kit_overrides for s in specs]):
            print(f"note: {repeat.note(len(specs))}")
    try:
        with no_space.writing(opts["logs_root"], "the sweep folder and its submissions.jsonl", 2 * no_space.BLOCK):
            claim = claim_folder(opts["logs_root"], opts["name"], generated=opts["generated"], resume=opts["resume"])
    except SweepFolderError as exc:
        _refuse(str(exc))
    except no_space.NoSpace as exc:  # the claim removed the folder it made
        _refuse(_no_space_line(exc, opts, "nothing was left behind"))
    undo = no_space.Undo.of_claim(claim)
    with claim:
        try:
            return _submit_claimed(claim, undo, first, opts, specs, cluster, meta, chained, plan, rebuild)
        except no_space.NoSpace as exc:
            undone = undo.run()
            exc.free = no_space.free_bytes(exc.folder)  # what the user has once this command's files are gone
            _refuse(_no_space_line(exc, opts, undone))


def _no_space_line(exc: no_space.NoSpace, opts: dict[str, Any], undone: str) -> str:
    """The one line a full disk during the sweep command leaves (what, where, the space, the fix)."""
    name = f"sweep_name={opts['name']} is free to use again" if not opts["resume"] else "the sweep is as it was"
    return (
        f"{exc.describe()}; nothing was submitted ({undone}; {name}). Free at least {no_space.human(exc.needed)} "
        f"under {opts['logs_root']} (or choose another logs_root=) and run the same command again."
    )


def _submit_claimed(claim: Claim, undo: no_space.Undo, first, opts, specs, cluster, meta, chained, plan, rebuild):
    """The claimed folder's steps: chain plan, snapshot, point files, manifest, submission (a full
    disk in any of them raises :class:`grpokit.submit.no_space.NoSpace`; ``undo`` knows what they wrote)."""
    if claim.name != opts["name"]:  # the generated name was taken (same second): the next free one
        specs = rebuild(claim.name)
    undo.keep(claim.path / "chain.json")
    with no_space.writing(claim.path, "chain.json", no_space.BLOCK):
        chain.record_plan(claim.path, chained)  # before submission: submit_slurm chains each point
    if claim.resumed:
        return resume_sweep(claim, specs, cluster, wait=opts["wait"], undo=undo)
    if executor_for(cluster).runs_later and not first.use_live_code:
        with no_space.writing(claim.path, "the code snapshot (code/)", snapshot.estimate()):
            snapshot.take(claim.path)  # the code every attempt of every point runs (grpokit.submit.snapshot)
    returns = submit_new(claim, specs, cluster, meta, wait=opts["wait"])
    if plan is not None:
        halving_controller.start(claim.path, specs, plan)  # the controller job that continues the best points
    return returns


def dry_run(opts: dict[str, Any], specs: list[PointSpec], cluster: dict[str, Any], meta: dict, rebuild):
    """Write ``dry_run.md`` (and, in a new folder, a manifest marked ``dry_run``); submit nothing.

    A dry run never claims the folder: a later real sweep of the same name takes it over. With
    ``resume=true`` on a submitted sweep it checks the settings and lists what would be resubmitted.
    """
    sweep_dir = opts["logs_root"] / opts["name"]
    if opts["resume"] and folder_state(sweep_dir) == "sweep":
        _check_resume(sweep_dir, specs)
        chosen = resume_mod.to_resubmit(resume_mod.point_states(sweep_dir))
        todo = [s for s in specs if s.index in chosen]
        if not todo:
            print(f"dry run of resume=true: settings match {sweep_dir}; nothing to resubmit")
            return [_job_return(s, None) for s in specs]
        rows = sweep_sources(todo)
        path = write_dry_run(sweep_dir, todo, cluster, note=" (resume=true: the points it would resubmit)", rows=rows)
        specs = todo
    else:
        try:
            sweep_dir = dry_run_folder(opts["logs_root"], opts["name"], generated=opts["generated"])
        except SweepFolderError as exc:
            _refuse(str(exc))
        if sweep_dir.name != opts["name"]:
            specs = rebuild(sweep_dir.name)
        rows = sweep_sources(specs)
        path = write_dry_run(sweep_dir, specs, cluster, rows=rows)
        if folder_state(sweep_dir) != "sweep":  # a real sweep may have taken the folder over meanwhile
            write_manifest(sweep_dir, specs, [None] * len(specs), dry_run=True, **meta)
    print(dry_run_summary(path, specs, rows))  # the full text stays in the file (thousands of lines for 64 points)
    print(f"dry run: {len(specs)} point(s) validated, nothing submitted; see {path}")
    return [_job_return(s, None) for s in specs]


def _check_resume(sweep_dir: Path, specs: list[PointSpec]) -> None:
    """Refuse a resume whose settings differ from the recorded ones (names point, key, old -> new)."""
    problems = resume_mod.check_same_settings(read_manifest(sweep_dir), specs)
    if problems:
        head = f"resume=true refused: this command's settings differ from those recorded in {sweep_dir}."
        _refuse(f"{head}\n{SweepValidationError(problems)}")


def _write_point_files(specs: list[PointSpec]) -> None:
    """``<run>/point.json`` of every point at submission: what a later resume compares against."""
    for spec in specs:
        Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
        RunFolder(spec.run_dir).point.write_text(spec.to_json())


def _manifest_bytes(specs: list[PointSpec]) -> int:
    """About the size of ``manifest.json`` for these points (each entry repeats its overrides)."""
    return no_space.BLOCK + sum(len(s.to_json()) // 2 for s in specs)


@contextlib.contextmanager
def _cancelled_when_full(job_ids: list[str | None]):
    """A full disk after the jobs were queued: they are cancelled (the folder they would run in is
    then undone), and the line says so; a failed ``scancel`` is named."""
    try:
        yield
    except no_space.NoSpace as exc:
        if any(job_ids):  # the local backend queued nothing
            said = scancel([str(j) for j in job_ids if j])
            exc.what += f"; its jobs {arrays_phrase(job_ids)} were cancelled" if said is None else f"; scancel: {said}"
        raise


def submit_new(claim: Claim, specs: list[PointSpec], cluster: dict[str, Any], meta: dict, *, wait: bool):
    """A new sweep in a folder just claimed: point files, manifest, then the points through the
    cluster's executor (:mod:`grpokit.submit.backends`: Slurm job arrays, or runs here)."""
    global submitting_into
    sweep_dir = claim.path
    names = [s.name for s in specs]
    submitting_into = sweep_dir
    spec_bytes = sum(no_space.BLOCK + len(s.to_json()) for s in specs)
    with no_space.writing(sweep_dir, f"the point folders ({len(specs)} point.json)", spec_bytes + no_space.BLOCK):
        _write_point_files(specs)
    # The manifest exists before the jobs do: a sweep command killed mid-submission leaves its
    # points (and run folders) findable; the Slurm ids are filled in right after.
    with no_space.writing(sweep_dir, "manifest.json", _manifest_bytes(specs)):
        write_manifest(sweep_dir, specs, [None] * len(specs), **meta)
    executor = executor_for(cluster)
    before = attempt_counts(specs)
    # a refused submission leaves nothing queued and, when nothing was, no folder (submit_slurm)
    job_ids = executor.submit(sweep_dir, specs)
    with _cancelled_when_full(job_ids):  # jobs queued: a full disk now cancels them
        with no_space.writing(sweep_dir, "manifest.json", _manifest_bytes(specs)):
            write_manifest(sweep_dir, specs, job_ids, **meta)
            snapshot.record(sweep_dir)  # the commit the jobs run (null: use_live_code, or run here)
        with no_space.writing(sweep_dir, "submissions.jsonl", no_space.BLOCK):
            claim.record("new", names, job_ids)
    claim.release()
    ran = executor.run_pending(specs)
    print(f"{executor.done(len(specs), job_ids)}; sweep folder {sweep_dir}")
    _follow(executor, specs, job_ids, before, sweep_dir, wait=wait)
    _exit_if_failed_here(ran)
    codes = {s.index: c for s, c in ran}
    return [_job_return(s, codes.get(s.index, j)) for s, j in zip(specs, job_ids, strict=True)]


def _follow(executor, specs: list[PointSpec], job_ids: list[str | None], before: list[int], sweep_dir: Path, *, wait):
    """Jobs that run later: the command to watch them, and with ``wait=true`` the wait for them."""
    if not executor.runs_later:
        return
    print(f"  watch: {kit_command('status', f'{sweep_dir} --watch')}")
    if wait:
        _wait(specs, job_ids, before)


def resume_sweep(claim: Claim, specs: list[PointSpec], cluster: dict[str, Any], *, wait: bool, undo=None):
    """``resume=true``: same settings (else refused), resubmit only the points not completed/queued/running.
    ``undo``: what a full disk undoes (:class:`grpokit.submit.no_space.Undo`)."""
    sweep_dir = claim.path
    _check_resume(sweep_dir, specs)
    states = resume_mod.point_states(sweep_dir)
    chosen = resume_mod.to_resubmit(states)
    kept = {i: s for i, s in states.items() if i not in chosen}
    left = ", ".join(f"{n} {w}" for w, n in sorted(Counter(kept.values()).items())) or "none"
    todo = [s for s in specs if s.index in chosen]
    if not todo:
        print(f"resume: settings match; nothing to resubmit in {sweep_dir} (points: {left})")
        return [_job_return(s, None) for s in specs]
    from grpokit.submit.resubmit_points import submit_again  # it submits through submit_slurm, below

    global submitting_into
    submitting_into = sweep_dir
    before = attempt_counts(todo)
    executor = executor_for(cluster)
    job_ids, _ = submit_again(claim, todo, chosen, how="resume", undo=undo)
    claim.release()
    ran = executor.run_pending(todo)
    what = ", ".join(f"{s.name} ({chosen[s.index]})" for s in todo)
    print(f"resume: {executor.done(len(todo), job_ids, again=True)}: {what}")
    print(f"  left alone: {left}; sweep folder {sweep_dir}")
    _follow(executor, todo, job_ids, before, sweep_dir, wait=wait)
    _exit_if_failed_here(ran)
    return [_job_return(s, None) for s in specs]


def _wait(specs: list[PointSpec], job_ids: list[str | None], before: list[int]) -> None:
    """``wait=true``: block on this submission's points; exit 1 when one of them did not complete."""
    states = wait_for(specs, job_ids, before)
    counts = ", ".join(f"{n} {w}" for w, n in sorted(Counter(states).items()))
    print(f"wait: every submitted point is final: {counts}")
    bad = [f"{s.name} ({st})" for s, st in zip(specs, states, strict=True) if st != "completed"]
    if bad:
        _refuse(f"wait: {len(bad)} point(s) did not complete: {', '.join(bad)}", code=1)


def local_failures(ran: list[tuple[PointSpec, int]]) -> list[str]:
    """``name (state)`` of each point run here whose driver exited non-zero (failed, cancelled);
    ``ran``: ``(point, exit status)`` pairs (:meth:`grpokit.submit.backends.Executor.run_pending`)."""
    return [
        f"{s.name} ({getattr(read_status_or_none(s.run_dir), 'state', None) or 'no status.json'})"
        for s, code in ran
        if code != 0
    ]


def _exit_if_failed_here(ran: list[tuple[PointSpec, int]]) -> None:
    """Exit 1 (the command's status) when a point run on this machine did not end well."""
    bad = local_failures(ran)
    if bad:
        _refuse(f"{len(bad)} point(s) run here did not succeed: {', '.join(bad)}; see each run folder's status.json", 1)


def _job_return(spec: PointSpec, value) -> JobReturn:
    ret = JobReturn(overrides=spec.kit_overrides, working_dir=spec.run_dir)
    ret.status = JobStatus.COMPLETED
    ret.return_value = value
    return ret
