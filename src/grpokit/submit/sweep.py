"""compose -> build points -> validate all -> dry run | submit one Slurm array | run locally -> manifest."""

from __future__ import annotations

import contextlib
import logging
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig

from grpokit.config.override_step import cached_interpolation_parsing
from grpokit.config.point import PointSpec, build_point, kit_notices
from grpokit.paths import CONFIG_DIR, kit_command
from grpokit.run_folder import RunFolder, SweepFolder, read_status
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
from grpokit.submit import chain, halving, repeats, snapshot
from grpokit.submit import resume as resume_mod
from grpokit.submit.dry_run_summary import dry_run_summary
from grpokit.submit.task import RunPointTask
from grpokit.submit.wait import attempt_counts, wait_for
from grpokit.validate import Problem, SweepValidationError, overlap, validate_points

log = logging.getLogger(__name__)

#: The sweep folder whose points are being submitted (or run here); None before (a Ctrl-C then
#: leaves nothing behind: ``grpokit.cli`` says so).
submitting_into: Path | None = None


def _parse(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def swept_keys(job_overrides: list[list[str]]) -> list[str]:
    """Keys whose value differs between points, in command-line order."""
    values: dict[str, set[str]] = {}
    order: list[str] = []
    for overrides in job_overrides:
        for o in overrides:
            k, v = _parse(o)
            if k not in values:
                values[k] = set()
                order.append(k)
            values[k].add(v)
    return [k for k in order if len(values[k]) > 1]


def build_points(
    config: DictConfig,
    load,
    job_overrides: list[list[str]],
    first_index: int = 0,
    name: str | None = None,
    on_point=None,
) -> list[PointSpec]:
    """One :class:`PointSpec` per point; ``load`` composes a point's kit config (:class:`PointLoader`,
    or any ``load(overrides) -> DictConfig``); ``name``: the sweep's name, set on every point;
    ``on_point(spec)``: called with each point as soon as it is built (the sweep hands it to the
    forked validator, :func:`grpokit.validate.overlap.feed`).

    Raises:
        SweepValidationError: a point does not compose (a value that does not fit its key), named.
    """
    keys = swept_keys(job_overrides)
    specs = []
    with cached_interpolation_parsing():  # every point resolves the same ${...} texts of verl's config
        for i, overrides in enumerate(job_overrides):
            specs.append(_build(load, overrides, first_index + i, keys, name))
            if on_point is not None:
                on_point(specs[-1])
    return specs


def _build(load, overrides: list[str], index: int, keys: list[str], name: str | None) -> PointSpec:
    from hydra.errors import HydraException

    point = load.point(overrides) if isinstance(load, PointLoader) else contextlib.nullcontext(None)
    try:
        with point as cfg:
            cfg = load(overrides) if cfg is None else cfg
            if name is not None:  # run folders and checkpoints follow the claimed folder's name
                cfg.sweep_name = name
            swept = dict(_parse(o) for o in overrides if _parse(o)[0] in keys)
            return build_point(cfg, index=index, kit_overrides=overrides, swept=swept)
    except HydraException as exc:  # Hydra's override step refused one of this point's values
        text = str(exc).splitlines()[0]
        named = re.search(r"'([^']+)'", text)
        key = named.group(1) if named else ", ".join(f"{k}={v}" for k, v in map(_parse, overrides) if k in keys)
        fix = "give the key a value of its type, or check its name (grpokit sweep --help)"
        raise SweepValidationError([Problem(f"point {index}", key, text, fix)]) from None


def check_picklable(specs: list[PointSpec]) -> None:
    """What submitit will pickle must pickle now, not fail after submission (hydra#3038)."""
    import cloudpickle

    problems = []
    for spec in specs:
        for what, obj in (("the task", RunPointTask()), ("the point spec", spec.to_json())):
            try:
                cloudpickle.dumps(obj)
            except Exception as exc:
                problems.append(
                    Problem(
                        spec.name,
                        what,
                        f"cannot be pickled: {type(exc).__name__}: {exc}",
                        "keep only plain values (str, numbers, lists, dicts) in the config",
                    )
                )
    if problems:
        raise SweepValidationError(problems)


def write_dry_run(sweep_dir: Path, specs: list[PointSpec], cluster: dict[str, Any], note: str = "") -> Path:
    """``dry_run.md``: per point, the verl command line and the Slurm request."""
    from grpokit.config.explicit import data_caps
    from grpokit.runtime import trainer
    from grpokit.submit.arrays import dry_run_section

    lines = [f"# Dry run of sweep {specs[0].sweep_name}: {len(specs)} point(s){note}, nothing submitted", ""]
    lines += [f"Note: {notice}\n" for notice in kit_notices(specs)]  # what the kit changed on its own
    lines += dry_run_section(specs)  # one array per request and MaxArraySize, as submit_slurm sends them
    for spec in specs:
        cmd = trainer.command(spec, [])
        caps = data_caps(spec)
        lines += [f"## {spec.name}", f"run folder: {spec.run_dir}", *([caps] if caps else []), ""]
        lines += ["```", " \\\n  ".join(cmd), "```", ""]
    path = SweepFolder(sweep_dir).dry_run
    path.write_text("\n".join(lines))
    return path


def submit_slurm(sweep_dir: Path, specs: list[PointSpec], cluster: dict[str, Any]) -> list[str]:
    """Submit every point (one job array per request and ``MaxArraySize``); returns the Slurm ids.

    A submission Slurm refuses ends the command (exit 2) with one line saying what Slurm said and
    what to change; nothing stays queued, and the sweep folder is left as it was before the
    submission (a new one is removed, see :func:`grpokit.submit.arrays.after_refusal`).
    """
    from grpokit.submit.arrays import SubmissionError, after_refusal, submit_arrays

    try:
        ids = submit_arrays(sweep_dir / "submitit", specs, name=specs[0].sweep_name)
    except SubmissionError as exc:
        print(f"{exc}; {after_refusal(sweep_dir, specs, exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    chain.follow(sweep_dir, specs, ids)  # after=[merge,eval]: each point's chained job (grpokit.submit.chain)
    return ids


def arrays_phrase(job_ids: list[str | None]) -> str:
    """``Slurm array 120`` or ``Slurm arrays 120, 121`` (a sweep above MaxArraySize goes out as several)."""
    arrays = list(dict.fromkeys(str(j).split("_")[0] for j in job_ids if j))
    return f"Slurm array{'s' if len(arrays) > 1 else ''} {', '.join(arrays)}"


def run_local(specs: list[PointSpec]) -> list[int]:
    """Run points one after another on this machine (a workstation's GPU holds one at a time).

    Returns each point's driver exit status (:class:`grpokit.runtime.outcome.Exit`: 0 for
    completed, skipped_no_gpu, stopped with a checkpoint; 1 for failed or cancelled)."""
    codes = []
    for spec in specs:
        Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
        point_file = RunFolder(spec.run_dir).point
        point_file.write_text(spec.to_json())
        log.info("running %s locally", spec.name)
        codes.append(subprocess.call([sys.executable, "-m", "grpokit.runtime.driver", str(point_file)]))
    return codes


class PointLoader:
    """Composes a sweep's points: the first fully (Hydra's defaults list), the others from it.

    A point that differs from the first only in values (not in config groups such as
    ``experiment=``, nor in ``hydra.*``) is the first point's config with its own values applied
    by Hydra's override step (:mod:`grpokit.config.override_step`); composing the whole defaults
    list again per point (about a second each: the kit's config holds verl's complete one) made
    validation of large sweeps slow. ``tests/unit/test_config_points.py`` checks both give equal configs.

    ``loader(overrides)`` returns a new, independent config; ``with loader.point(overrides) as cfg``
    gives one valid inside the block only, without copying the whole config (what the sweep uses).

    Raises:
        hydra.errors.ConfigCompositionException: a point does not compose, in Hydra's words.
    """

    def __init__(self, full_load, first: list[str]) -> None:
        from grpokit.config import override_step

        self._full_load = full_load
        self._first = set(first)
        self._groups = {p.name for p in CONFIG_DIR.iterdir() if p.is_dir()}
        composed = full_load(first)
        self._template = override_step.Template(composed)
        self._workspace = override_step.Workspace(composed, first)

    def _diff(self, overrides: list[str]) -> list[str] | None:
        """This point's overrides that differ from the first's, or None when one picks a config group."""
        from grpokit.config import override_step

        # `+key=v` of this point adds a key the first point added too: on its config it is a
        # force-add (`++`), as composing this point from scratch would have made it.
        diff = [
            "+" + o if o.startswith("+") and not o.startswith("++") else o for o in overrides if o not in self._first
        ]
        parsed = override_step.parse(diff)
        if any(o.key_or_group.split("/")[0] in self._groups or o.key_or_group.startswith("hydra") for o in parsed):
            return None
        return diff

    def __call__(self, overrides: list[str]) -> DictConfig:
        from grpokit.config import override_step

        diff = self._diff(overrides)
        if diff is None:
            return self._full_load(overrides)
        cfg = self._template.copy()
        override_step.apply(cfg, diff)
        return cfg

    @contextlib.contextmanager
    def point(self, overrides: list[str]):
        """The point's config, valid inside the ``with`` block (the first point's values are put back after)."""
        delta = self._workspace.delta(overrides) if self._diff(overrides) is not None else None
        if delta is None:  # another key set, a deletion or a config group: composed on its own
            yield self(overrides)
            return
        with self._workspace.point(delta) as cfg:
            yield cfg


def point_loader(full_load, first: list[str]) -> PointLoader:
    """``load(overrides) -> kit config`` that composes the first point fully and derives the others."""
    return PointLoader(full_load, first)


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
    raw = first._get_node("sweep_name")._value()  # unresolved: is it the ${now:...} default?
    return {
        "name": str(first.sweep_name),
        "generated": is_generated(str(raw)),
        "resume": bool(first.get("resume", False)),
        "dry_run": bool(first.get("dry_run", False)),
        "wait": bool(first.get("wait", False)),
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
        claim = claim_folder(opts["logs_root"], opts["name"], generated=opts["generated"], resume=opts["resume"])
    except SweepFolderError as exc:
        _refuse(str(exc))
    with claim:
        if claim.name != opts["name"]:  # the generated name was taken (same second): the next free one
            specs = rebuild(claim.name)
        chain.record_plan(claim.path, chained)  # before submission: submit_slurm chains each point
        if claim.resumed:
            return resume_sweep(claim, specs, cluster, wait=opts["wait"])
        if cluster.kind == "slurm" and not first.get("use_live_code", False):
            snapshot.take(claim.path)  # the code every attempt of every point runs (grpokit.submit.snapshot)
        returns = submit_new(claim, specs, cluster, meta, wait=opts["wait"])
        if plan is not None:
            halving.start(claim.path, specs, plan)  # the controller job that continues the best points
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
        path = write_dry_run(sweep_dir, todo, cluster, note=" (resume=true: the points it would resubmit)")
        specs = todo
    else:
        try:
            sweep_dir = dry_run_folder(opts["logs_root"], opts["name"], generated=opts["generated"])
        except SweepFolderError as exc:
            _refuse(str(exc))
        if sweep_dir.name != opts["name"]:
            specs = rebuild(sweep_dir.name)
        path = write_dry_run(sweep_dir, specs, cluster)
        if folder_state(sweep_dir) != "sweep":  # a real sweep may have taken the folder over meanwhile
            write_manifest(sweep_dir, specs, [None] * len(specs), dry_run=True, **meta)
    print(dry_run_summary(path, specs))  # the full text stays in the file (thousands of lines for 64 points)
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


def submit_new(claim: Claim, specs: list[PointSpec], cluster: dict[str, Any], meta: dict, *, wait: bool):
    """A new sweep in a folder just claimed: point files, manifest, one array (or local runs)."""
    global submitting_into
    sweep_dir = claim.path
    names = [s.name for s in specs]
    submitting_into = sweep_dir
    _write_point_files(specs)
    # The manifest exists before the jobs do: a sweep command killed mid-submission leaves its
    # points (and run folders) findable; the Slurm ids are filled in right after.
    write_manifest(sweep_dir, specs, [None] * len(specs), **meta)
    if cluster.kind == "slurm":
        before = attempt_counts(specs)
        # a refused submission leaves nothing queued and, when nothing was, no folder (submit_slurm)
        job_ids = submit_slurm(sweep_dir, specs, cluster)
        write_manifest(sweep_dir, specs, job_ids, **meta)
        snapshot.record(sweep_dir)  # the commit the jobs run (null: use_live_code)
        claim.record("new", names, job_ids)
        claim.release()
        print(f"submitted {len(specs)} point(s) as {arrays_phrase(job_ids)}; sweep folder {sweep_dir}")
        print(f"  watch: {kit_command('status', f'{sweep_dir} --watch')}")
        if wait:
            _wait(specs, job_ids, before)
        return [_job_return(s, j) for s, j in zip(specs, job_ids, strict=True)]
    claim.record("new", names, [None] * len(specs))
    claim.release()
    codes = run_local(specs)
    print(f"ran {len(specs)} point(s) locally; sweep folder {sweep_dir}")
    _exit_if_failed_here(specs, codes)
    return [_job_return(s, c) for s, c in zip(specs, codes, strict=True)]


def resume_sweep(claim: Claim, specs: list[PointSpec], cluster: dict[str, Any], *, wait: bool):
    """``resume=true``: same settings (else refused), resubmit only the points not completed/queued/running."""
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
    from grpokit.submit.resubmit import submit_again  # it submits through submit_slurm, below

    global submitting_into
    submitting_into = sweep_dir
    before = attempt_counts(todo)
    job_ids, _ = submit_again(claim, todo, chosen, how="resume")
    claim.release()
    what = ", ".join(f"{s.name} ({chosen[s.index]})" for s in todo)
    if cluster.kind != "slurm":
        codes = run_local(todo)
        print(f"resume: ran {len(todo)} point(s) here: {what}; left alone: {left}")
        _exit_if_failed_here(todo, codes)
        return [_job_return(s, None) for s in specs]
    print(f"resume: resubmitted {len(todo)} point(s) as {arrays_phrase(job_ids)}: {what}")
    print(f"  left alone: {left}; sweep folder {sweep_dir}")
    print(f"  watch: {kit_command('status', f'{sweep_dir} --watch')}")
    if wait:
        _wait(todo, job_ids, before)
    return [_job_return(s, None) for s in specs]


def _wait(specs: list[PointSpec], job_ids: list[str | None], before: list[int]) -> None:
    """``wait=true``: block on this submission's points; exit 1 when one of them did not complete."""
    states = wait_for(specs, job_ids, before)
    counts = ", ".join(f"{n} {w}" for w, n in sorted(Counter(states).items()))
    print(f"wait: every submitted point is final: {counts}")
    bad = [f"{s.name} ({st})" for s, st in zip(specs, states, strict=True) if st != "completed"]
    if bad:
        _refuse(f"wait: {len(bad)} point(s) did not complete: {', '.join(bad)}", code=1)


def local_failures(specs: list[PointSpec], codes: list[int]) -> list[str]:
    """``name (state)`` of each point run here whose driver exited non-zero (failed, cancelled)."""
    return [
        f"{s.name} ({read_status(Path(s.run_dir)).get('state') or 'no status.json'})"
        for s, code in zip(specs, codes, strict=True)
        if code != 0
    ]


def _exit_if_failed_here(specs: list[PointSpec], codes: list[int]) -> None:
    """Exit 1 (the command's status) when a point run on this machine did not end well."""
    bad = local_failures(specs, codes)
    if bad:
        _refuse(f"{len(bad)} point(s) run here did not succeed: {', '.join(bad)}; see each run folder's status.json", 1)


def _job_return(spec: PointSpec, value) -> JobReturn:
    ret = JobReturn(overrides=spec.kit_overrides, working_dir=spec.run_dir)
    ret.status = JobStatus.COMPLETED
    ret.return_value = value
    return ret
