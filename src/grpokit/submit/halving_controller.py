"""Successive halving's controller: the Slurm jobs that carry a halving sweep from rung to rung.

The decisions are :mod:`grpokit.submit.halving` (plan, ranking, the stage's steps); this module
observes the run folders, asks Slurm (:func:`grpokit.slurm.named_jobs.queued_since`), submits and
records each step in ``<sweep>/halving.json`` (:mod:`grpokit.run_folder.halving_record`).

- With the sweep's array the kit submits a small controller job (:func:`start`;
  ``--dependency=afterany:<array ids>``, one CPU, no GPU; no daemon on the login node), and its one
  restart (``afternotok`` on it: it runs only if the controller failed or its node was lost).
- The controller (:func:`advance`) ranks the stage's points from their ``status.json`` and merged
  ``metrics.jsonl``, prunes the others (``status.json``: ``pruned`` with the reason), resubmits the
  kept (``resubmit.json``, the next rung as target; verl resumes from the rung's checkpoint) and
  submits the next stage's controller. It is idempotent per stage: the decision is written before
  anything acts on it, and each submission records that it began (``resubmitting`` /
  ``controller_submitting``) and, right after sbatch, its job ids.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpokit.config.point import PointSpec
from grpokit.config.schema import ClusterConf
from grpokit.run_folder import RunFolder, now, pending_status, read_status, read_status_or_none, write_status
from grpokit.run_folder.claim import open_existing
from grpokit.run_folder.halving_record import HalvingPlan, HalvingRecord, HalvingStage, read_halving, write_halving
from grpokit.run_folder.layout import HALVING
from grpokit.run_folder.manifest import read_manifest, replace_job_ids
from grpokit.runtime.decisions import resubmission
from grpokit.slurm import named_jobs, sbatch
from grpokit.submit import arrays
from grpokit.submit import halving as rules
from grpokit.submit.dependent import dependent_executor

log = logging.getLogger(__name__)


# -- what the controller observes ----------------------------------------------------------------------
def metric_at(run_dir: Path, metric: str, step: int) -> tuple[str, float | None]:
    """``(metric key, value)``: its last logged value at or before ``step`` in the run's merged
    series (``val_acc``: the first ``val-core/<data_source>/acc/mean@1``); value None when absent."""
    from grpokit.run_folder.metrics import merge_attempts, val_acc_keys  # pandas: only in the controller

    df = merge_attempts(run_dir)
    key = metric
    if metric == rules.VAL_ACC:
        keys = val_acc_keys(df.columns)
        key = keys[0] if keys else "val-core/<data_source>/acc/mean@1"
    if key not in df.columns:
        return key, None
    values = df.loc[df["step"] <= step, key].dropna()
    return key, (float(values.iloc[-1]) if len(values) else None)


def observe(plan: HalvingPlan, stage: HalvingStage, run_dirs: Mapping[str, Path]) -> dict[str, rules.PointAtRung]:
    """Each of the stage's points as its ``status.json`` shows it; the metric only for those that
    completed the rung (the others are not ranked)."""
    seen = {}
    for name in stage.points:
        status = read_status_or_none(run_dirs[name]) or pending_status()  # a refused file: warned, not ranked
        state, last = status.state, status.last_step
        if rules.reached_rung(state, last, stage.target):
            seen[name] = rules.PointAtRung(state, last, *metric_at(run_dirs[name], plan.metric, stage.target))
        else:
            seen[name] = rules.PointAtRung(state, last)
    return seen


# -- submitting ---------------------------------------------------------------------------------------------
def submit_controller(sweep_dir: Path, cluster: ClusterConf, after: list[str], stage: int) -> tuple[str, str]:
    """Submit the controller of ``stage`` (its points' arrays ``after``) and its one restart.

    The restart is the same controller (:func:`advance` is idempotent) with
    ``--dependency=afterany:<arrays>,afternotok:<controller>``: it runs once, after the points, if
    the controller failed, timed out, lost its node or was cancelled, and Slurm cancels it
    (``--kill-on-invalid-dep``) when the controller completed.

    Returns:
        ``(controller id, restart id)``.
    """
    after_points = "afterany:" + ":".join(after)
    executor = _controller_executor(sweep_dir, cluster, after_points)
    controller = str(executor.submit(HalvingController(), str(sweep_dir), stage).job_id)
    executor = _controller_executor(sweep_dir, cluster, f"{after_points},afternotok:{controller}")
    restart = str(executor.submit(HalvingController(), str(sweep_dir), stage).job_id)
    return controller, restart


def _controller_executor(sweep_dir: Path, cluster: ClusterConf, dependency: str):
    """The controller's submitit executor: one CPU, 1 GB, 10 minutes, no GPU, the sweep's frozen code
    (:func:`grpokit.submit.dependent.dependent_executor`, the kit's one way to submit a dependent job)."""
    return dependent_executor(
        sweep_dir, cluster=cluster, name=f"{Path(sweep_dir).name}-halving", dependency=dependency, timeout_min=10
    )


def start(sweep_dir: Path, specs: list[PointSpec], plan: HalvingPlan) -> str:
    """After the sweep's submission: write ``halving.json`` and submit the first controller; returns its id."""
    sweep_dir = Path(sweep_dir)
    with open_existing(sweep_dir) as claim:
        points = read_manifest(sweep_dir).points
        record = rules.first_record(plan, [p.name for p in points], [p.job_id for p in points])
        after = rules.arrays_of(record.stages[0].job_ids)
        controller, restart = submit_controller(sweep_dir, specs[0].cluster, after, 0)
        write_halving(sweep_dir, rules.controller_submitted(record, 0, controller, restart))
        claim.record("halving-controller", [], [controller, restart], stage=0, after=after)
    print(
        f"successive halving: rungs {list(plan.rungs)} then {plan.final_target} steps, keep {plan.keep:g} "
        f"by {plan.metric} ({plan.mode}); controller job {controller} runs after array(s) {', '.join(after)} "
        f"(restarted once as job {restart} if it fails)"
    )
    return controller


def _prune(run_dir: Path, prune: rules.Prune) -> None:
    """Mark a point that completed its rung ``pruned`` (a final state) with the reason; a point
    already pruned by this stage (a restarted controller) is left as it is."""
    status = read_status(run_dir)
    if status.state == "pruned" and status.halving is not None and status.halving.to_json() == prune.marker:
        return
    write_status(run_dir, status.with_fields(state="pruned", reason=prune.reason, halving=prune.marker, updated=now()))


def _refuse_if_queued(job_name: str, since: str | None, where: str, what: str, fix: str) -> None:
    """An earlier controller began a submission (``what``) at ``since`` and recorded no job ids:
    :class:`~grpokit.submit.halving.HalvingError` when Slurm holds jobs named ``job_name``
    submitted since (that controller may have submitted them); the message starts with ``where``
    and ends with ``fix``."""
    if since and (queued := named_jobs.queued_since(job_name, since)):
        raise rules.HalvingError(
            f"{where}: an earlier controller started {what} at {since} and Slurm holds job(s) {', '.join(queued)} "
            f"named {job_name} since; not submitting twice. {fix}"
        )


class _Sweep:
    """The controller's view of one sweep folder while it holds the folder's claim."""

    def __init__(self, sweep_dir: Path, claim) -> None:
        self.dir = sweep_dir
        self.claim = claim
        self.manifest = read_manifest(sweep_dir)
        self.entries = {p.name: p for p in self.manifest.points}

    def run_dir(self, name: str) -> Path:
        return Path(self.entries[name].run_dir)

    def spec(self, name: str) -> PointSpec:
        return PointSpec.from_json(RunFolder(self.run_dir(name)).point.read_text())

    def resubmit(self, record: HalvingRecord, stage: int, step: rules.Resubmit) -> HalvingRecord:
        """Resubmit the kept points with the next target as one array; record it everywhere."""
        rung = rules.rung_label(record.plan, stage)
        sweep_name = self.spec(step.points[0]).sweep_name
        _refuse_if_queued(
            sweep_name,
            step.since,
            f"{rung} of {self.dir}",
            "resubmitting the kept points",
            f"Check squeue --name {sweep_name}; to continue, record them in {self.dir / HALVING} or resubmit "
            f"the kept points ({', '.join(step.points)}) with grpokit resubmit",
        )
        specs = []
        for name in step.points:
            spec = rules.with_target(self.spec(name), step.target)
            RunFolder(self.run_dir(name)).point.write_text(spec.to_json())
            resubmission.request(self.run_dir(name))
            specs.append(spec)
        record = rules.began_resubmit(record, stage, now())
        write_halving(self.dir, record)
        sbatch.drop_job_variables()  # the controller job's own SLURM_* would be read by sbatch
        ids = list(arrays.submit_arrays(self.dir / "submitit", specs, name=specs[0].sweep_name))
        record = rules.resubmitted(record, stage, step, ids)
        write_halving(self.dir, record)
        self.claim.record("halving", list(step.points), ids, stage=stage + 1, target=step.target)
        replace_job_ids(
            self.manifest,
            {
                self.entries[n].index: (j, f"completed (rung {stage + 1})")
                for n, j in zip(step.points, ids, strict=True)
            },
        )
        self.manifest.write(self.dir)
        return record

    def submit_next_controller(self, record: HalvingRecord, stage: int, step: rules.SubmitController) -> HalvingRecord:
        """Submit the next stage's controller and its restart after the stage's arrays; record them."""
        _refuse_if_queued(
            f"{self.dir.name}-halving",
            step.since,
            f"{rules.rung_label(record.plan, stage)} of {self.dir}",
            "submitting the next controller",
            f"Record it in {self.dir / HALVING} as stages[{step.stage}].controller",
        )
        record = rules.began_controller(record, step.stage, now())
        write_halving(self.dir, record)
        cluster = self.spec(record.stages[step.stage].points[0]).cluster
        controller, restart = submit_controller(self.dir, cluster, list(step.after), step.stage)
        record = rules.controller_submitted(record, step.stage, controller, restart)
        write_halving(self.dir, record)
        self.claim.record("halving-controller", [], [controller, restart], stage=step.stage, after=list(step.after))
        return record


def advance(sweep_dir: Path, stage: int) -> dict[str, Any]:
    """The controller of ``stage``: rank, prune, resubmit the kept with the next target, submit the
    next controller (the steps :func:`grpokit.submit.halving.next_step` gives). Returns the stage's
    record as JSON (``{}`` when ``halving.json`` has no such stage).

    Idempotent, so that a restarted controller (:func:`submit_controller`) or any second run of
    the same stage finishes what the first left, and submits nothing twice: the decision is
    written to ``halving.json`` before anything acts on it, each step records that it is done
    (``resubmitting`` before sbatch, the job ids right after), and a run that finds
    ``resubmitting`` without job ids refuses to submit when ``squeue`` shows the sweep's jobs
    submitted since.

    Raises:
        grpokit.submit.halving.HalvingError: jobs that an interrupted controller may have submitted
            (naming them and what to do).
        grpokit.run_folder.halving_record.HalvingRecordError: ``halving.json`` is not a halving record.
    """
    sweep_dir = Path(sweep_dir)
    with open_existing(sweep_dir) as claim:
        record = read_halving(sweep_dir)
        step = rules.next_step(record, stage)
        if isinstance(step, rules.NotRecorded):
            log.warning("halving stage %d of %s is not recorded; nothing to do", stage, sweep_dir)
            return {}
        assert record is not None  # next_step says NotRecorded for None
        sweep = _Sweep(sweep_dir, claim)
        rung = rules.rung_label(record.plan, stage)
        if isinstance(step, rules.Decide):  # 1. decide, and record the decision before acting on it
            current = record.stages[stage]
            seen = observe(record.plan, current, {n: sweep.run_dir(n) for n in current.points})
            record = record.with_stage(rules.decide_stage(record.plan, current, seen, now()))
            write_halving(sweep_dir, record)
        elif record.stages[stage].is_decided:
            log.warning(
                "%s of %s was decided at %s: finishing what is left", rung, sweep_dir, record.stages[stage].decided
            )
        for prune in rules.prunes(record, stage):  # 2. prune (a point already pruned by this stage is left)
            _prune(sweep.run_dir(prune.name), prune)
        decided = record.stages[stage]
        if decided.is_decided:
            log.info("%s: kept %s; pruned %s; out %s", rung, decided.kept, decided.pruned, decided.out)
        for _ in range(3):  # 3. resubmit the kept, once; 4. the next stage's controller, once
            step = rules.next_step(record, stage)
            if isinstance(step, rules.Resubmit):
                record = sweep.resubmit(record, stage, step)
            elif isinstance(step, rules.SubmitController):
                record = sweep.submit_next_controller(record, stage, step)
            else:
                break
        if isinstance(step, rules.Done):
            log.info("%s", step.why)
        return record.stages[stage].to_json()


class HalvingController:
    """``HalvingController()(sweep_dir, stage)``: the controller job's callable (pickled by submitit)."""

    def __call__(self, sweep_dir: str, stage: int) -> dict[str, Any]:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        record = advance(Path(sweep_dir), stage)
        print(json.dumps(record, indent=2, default=str), file=sys.stdout, flush=True)
        return record
