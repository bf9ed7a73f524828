"""Successive halving of a sweep, the decisions: every point trains to a first rung, only the best continue.

    grpokit sweep -m ... verl.trainer.total_training_steps=6 halving.rungs=[2,4] halving.keep=0.5

This module decides and does nothing else (no Slurm, no file): the plan's checks, the ranking and
the stage's steps, so that each is unit-tested in milliseconds. The controller job that observes
the run folders, asks Slurm and submits is :mod:`grpokit.submit.halving_controller`; the record of
every decision is ``<sweep>/halving.json`` (:mod:`grpokit.run_folder.halving_record` has its format).

- At submission every point's ``trainer.total_training_steps`` is set to the first rung
  (:func:`at_first_rung`); the original value is the last stage's target. verl saves at its last
  step, so each point ends ``completed`` at the rung with a checkpoint of it.
- After a stage's points, its controller job ranks those that completed the rung by
  ``halving.metric`` (its last value at or before the rung step; ``val_acc``: the first
  ``val-core/<data_source>/acc/mean@1``), keeps the best ``max(1, floor(keep x points of the
  stage))`` (:func:`decide_stage`), prunes the others with the reason (``rung 1 (step 2): rank 5/8
  by val_acc 0.41 < cut 0.47 ...``, :func:`prunes`), resubmits the kept to the next rung (verl
  resumes from the rung's checkpoint) and submits the next controller (:func:`next_step` says which
  of these is next). After the last rung the survivors run to the original target.

Points that did not complete a rung (failed, pruned by ``runtime.pruning``, cancelled) keep their
state and take no place among the kept. Note that verl's learning-rate schedule is computed from
``total_training_steps``: with a warm-up or decay schedule each stage's run sees a schedule for its own
target (verl's default, a constant rate, is unaffected).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from grpokit.config.point import PointSpec
from grpokit.config.schema import HalvingConf
from grpokit.run_folder.halving_record import HalvingPlan, HalvingRecord, HalvingStage, RankedPoint

TARGET_KEY = "trainer.total_training_steps"
VAL_ACC = "val_acc"

__all__ = [
    "HalvingError",
    "HalvingPlan",
    "at_first_rung",
    "decide",
    "decide_stage",
    "next_step",
    "plan_of",
    "prunes",
    "requested",
    "versus_cut",
    "with_target",
]


class HalvingError(ValueError):
    """A halving setting the kit refuses, or a step the controller refuses; ``str()`` is one line."""


# -- the plan (at submission) ---------------------------------------------------------------------------
def requested(section: Mapping | None) -> bool:
    """Whether the command's ``halving`` section asks for successive halving (``halving.rungs`` set)."""
    return (section or {}).get("rungs") not in (None, "null", [])


def plan_of(section: Mapping | None, specs: list[PointSpec], swept: list[str], opts: Mapping) -> HalvingPlan | None:
    """The plan of the command's ``halving`` section; None when ``halving.rungs`` is unset.

    Raises:
        HalvingError: a bad value, a swept ``halving.*`` key, or a point that cannot take part
            (no ``trainer.total_training_steps`` above the last rung, no checkpoints, no validation
            for ``val_acc``, not on Slurm, ``resume``/``wait``), naming the point and key.
    """
    if not requested(section):
        return None
    section = {**dataclasses.asdict(HalvingConf()), **dict(section or {})}  # a key left out: its default
    rungs = section["rungs"]
    bad_swept = [k for k in swept if k.startswith("halving.")]
    if bad_swept:
        raise HalvingError(f"{bad_swept[0]} is swept; one sweep has one halving plan: give it one value")
    if isinstance(rungs, int | str):
        rungs = [rungs]
    try:
        steps = tuple(int(r) for r in rungs)
    except (TypeError, ValueError):
        raise HalvingError(f"halving.rungs={rungs!r}: must be a list of steps, e.g. halving.rungs=[2,4]") from None
    if any(s < 1 for s in steps) or list(steps) != sorted(set(steps)):
        raise HalvingError(f"halving.rungs={list(steps)}: steps must be >= 1 and increasing, e.g. [2,4]")
    keep = section["keep"]
    if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0 < keep < 1:
        raise HalvingError(f"halving.keep={keep!r}: must be a fraction in (0, 1), e.g. 0.5 (keep the better half)")
    mode = str(section["mode"])
    if mode not in ("max", "min"):
        raise HalvingError(f"halving.mode={mode!r}: must be max (higher is better) or min")
    metric = str(section["metric"] or VAL_ACC)
    for key, why in (("resume", "resume=true"), ("wait", "wait=true")):
        if opts.get(key):
            raise HalvingError(f"{why} with halving.rungs: not supported; the halving controller job carries the sweep")
    final = None
    for spec in specs:
        if spec.cluster.kind != "slurm":
            raise HalvingError(
                f"[{spec.name}] halving.rungs: successive halving runs its controller as a Slurm job; "
                "use a Slurm cluster (cluster=slurm or cluster=slurm_local)"
            )
        target = spec.verl_value(TARGET_KEY)
        if target in (None, "null") or int(target) <= steps[-1]:
            raise HalvingError(
                f"[{spec.name}] verl.{TARGET_KEY}={target}: halving needs a final target above the last rung "
                f"{steps[-1]}; set verl.{TARGET_KEY}"
            )
        if int(spec.verl_value("trainer.save_freq") or -1) <= 0:
            raise HalvingError(
                f"[{spec.name}] verl.trainer.save_freq: the survivors resume from the rung's checkpoint; "
                "set verl.trainer.save_freq > 0 (verl also saves at each rung, its last step)"
            )
        if metric == VAL_ACC and int(spec.verl_value("trainer.test_freq") or -1) <= 0:
            raise HalvingError(
                f"[{spec.name}] verl.trainer.test_freq: halving.metric=val_acc needs validation (verl validates "
                "at its last step, i.e. at each rung, when test_freq > 0); set verl.trainer.test_freq > 0"
            )
        if final is not None and int(target) != final:
            raise HalvingError(f"[{spec.name}] verl.{TARGET_KEY}={target}: every point of a halving sweep needs one")
        final = int(target)
    return HalvingPlan(steps, float(keep), metric, mode, int(final))


def with_target(spec: PointSpec, steps: int) -> PointSpec:
    """The spec with ``trainer.total_training_steps`` set to ``steps``."""
    overrides = [o for o in spec.verl_overrides if o.lstrip("+").partition("=")[0] != TARGET_KEY]
    return dataclasses.replace(spec, verl_overrides=[*overrides, f"{TARGET_KEY}={steps}"])


def at_first_rung(specs: list[PointSpec], plan: HalvingPlan | None) -> list[PointSpec]:
    """The specs as submitted: every point's target is the first rung (unchanged without a plan)."""
    return specs if plan is None else [with_target(s, plan.rungs[0]) for s in specs]


def first_record(plan: HalvingPlan, points: list[str], job_ids: list[str | None]) -> HalvingRecord:
    """The record of a sweep just submitted: stage 0 trains every point to the first rung."""
    return HalvingRecord(plan, 0, (HalvingStage(0, plan.target(0), tuple(points), tuple(job_ids)),))


def arrays_of(job_ids: tuple[str | None, ...] | list[str | None]) -> list[str]:
    """The Slurm array ids of submitit's task ids ``ARRAY_TASK``, in order, each once."""
    return list(dict.fromkeys(str(j).split("_")[0] for j in job_ids if j))


# -- ranking ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PointAtRung:
    """What the controller observed of one point of a stage: its ``status.json`` state and last
    step, and (only for a point that completed the rung) the metric's key and value at the rung."""

    state: str | None
    last_step: int | None
    metric_key: str | None = None
    value: float | None = None


def reached_rung(state: str | None, last_step: int | None, target: int) -> bool:
    """Whether a point completed the stage's target (only such points are ranked)."""
    return state == "completed" and last_step == target


def decide(
    values: dict[str, float | None], order: list[str], stage_size: int, plan: HalvingPlan
) -> tuple[list[RankedPoint], int]:
    """Rank the points that completed the rung (best first; no value or NaN ranks last; ties keep the
    order ``order``, the stage's points: the sweep's order at the first rung, the previous rung's
    ranking after it) and the number kept: ``max(1, floor(keep x stage_size))``, at most as many as
    were ranked."""
    sign = -1.0 if plan.mode == "max" else 1.0

    def key(name: str):
        v = values[name]
        missing = v is None or math.isnan(v)
        return (missing, 0.0 if missing else sign * v, order.index(name))

    names = sorted(values, key=key)
    kept = max(1, math.floor(plan.keep * stage_size + 1e-9))
    return [RankedPoint(n, values[n], i + 1) for i, n in enumerate(names)], min(kept, len(names))


def decide_stage(plan: HalvingPlan, stage: HalvingStage, observed: Mapping[str, PointAtRung], at: str) -> HalvingStage:
    """The stage with its decision (``ranked``, ``kept``, ``pruned``, ``out``, ``metric_key``,
    ``decided=at``), from what was observed of each of its points (``observed[name]``; a point
    not observed is ``pending``, out of the ranking)."""
    values: dict[str, float | None] = {}
    out: dict[str, str] = {}
    key_used = plan.metric
    for name in stage.points:
        seen = observed.get(name, PointAtRung(None, None))
        if not reached_rung(seen.state, seen.last_step, stage.target):
            out[name] = str(seen.state or "pending")
            continue
        key_used = seen.metric_key or key_used
        values[name] = seen.value
    ranked, n_keep = decide(values, list(stage.points), len(stage.points), plan)
    return dataclasses.replace(
        stage,
        metric_key=key_used,
        ranked=tuple(ranked),
        kept=tuple(r.name for r in ranked[:n_keep]),
        pruned=tuple(r.name for r in ranked[n_keep:]),
        out=out,
        decided=at,
    )


def rung_label(plan: HalvingPlan, stage: int) -> str:
    """``rung 1 (step 2)``: how messages name a stage's rung."""
    return f"rung {stage + 1} (step {plan.target(stage)})"


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def _missing(value: float | None) -> bool:
    return value is None or math.isnan(value)


def _fmt_apart(value: float, cut: float) -> tuple[str, str]:
    """Both numbers with 4 significant digits, or as many more as it takes to tell them apart
    (0.53196 and 0.53203 are not both "0.532")."""
    for digits in range(4, 18):
        a, b = f"{value:.{digits}g}", f"{cut:.{digits}g}"
        if a != b:
            return a, b
    return repr(value), repr(cut)


def versus_cut(value: float | None, cut: float | None, plan: HalvingPlan, stage: int) -> tuple[str, str]:
    """How a pruned point's value compares with the cut (the last kept point's value), as
    (``"0.1 < cut 0.3"``, a note ending ``"; "`` or ""). Worded as :func:`decide` ranks: a value equal
    to the cut is a tie, lost by sweep order at the first rung and by the previous rung's rank after
    it; a missing (None or NaN) value ranks last."""
    ties = (
        "ties go to the point earlier in the sweep"
        if stage == 0
        else f"ties go to the better rank at {rung_label(plan, stage - 1)}"
    )
    if _missing(value):
        if _missing(cut):
            return "none = cut none", f"not logged, which ranks last; {ties}; "
        return f"none, cut {_fmt(cut)}", "not logged, which ranks last; "
    if value == cut:
        return f"{_fmt(value)} = cut {_fmt(cut)}", f"a tie: {ties}; "
    shown, cut_shown = _fmt_apart(value, cut)
    return f"{shown} {'<' if plan.mode == 'max' else '>'} cut {cut_shown}", ""


@dataclasses.dataclass(frozen=True)
class Prune:
    """Set a point that completed its rung to ``pruned`` with ``reason``; ``marker`` goes into its
    ``status.json`` as ``"halving"`` (a point already pruned with this marker is left as it is)."""

    name: str
    reason: str
    marker: dict[str, int]


def prunes(record: HalvingRecord, stage: int) -> list[Prune]:
    """The prunings of a decided stage, with each point's reason (one line); none before the decision."""
    plan, rec = record.plan, record.stages[stage]
    if not rec.is_decided or rec.ranked is None:
        return []
    ranked, n_keep = rec.ranked, len(rec.kept or ())
    cut = ranked[n_keep - 1].value if ranked and n_keep else None
    label = plan.metric if plan.metric == rec.metric_key else f"{plan.metric} ({rec.metric_key})"
    out = []
    for r in ranked[n_keep:]:
        versus, note = versus_cut(r.value, cut, plan, stage)
        reason = (
            f"{rung_label(plan, stage)}: rank {r.rank}/{len(ranked)} by {label} {versus} "
            f"({note}kept {n_keep} of {len(rec.points)}, halving.keep={plan.keep:g})"
        )
        out.append(Prune(r.name, reason, {"stage": stage, "rung": rec.target, "rank": r.rank}))
    return out


# -- the stage's steps --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NotRecorded:
    """``halving.json`` has no such stage: nothing to do."""


@dataclasses.dataclass(frozen=True)
class Decide:
    """Rank the stage's points (:func:`decide_stage`) and record the decision before acting on it;
    then apply :func:`prunes` (idempotent, so done by every run of the controller)."""


@dataclasses.dataclass(frozen=True)
class Resubmit:
    """Resubmit the kept ``points`` with ``target`` (steps) as the next stage. ``since``: an earlier
    controller began this submission then (ISO time) and did not record its job ids: submit only if
    Slurm holds none of the sweep's jobs submitted since (else :class:`HalvingError`)."""

    points: tuple[str, ...]
    target: int
    since: str | None


@dataclasses.dataclass(frozen=True)
class SubmitController:
    """Submit the controller of stage ``stage`` (and its restart) after its arrays ``after``;
    ``since`` as for :class:`Resubmit`, with the sweep's controller jobs."""

    stage: int
    after: tuple[str, ...]
    since: str | None


@dataclasses.dataclass(frozen=True)
class Done:
    """Nothing is left for this stage's controller; ``why`` says so in one line."""

    why: str


Step = NotRecorded | Decide | Resubmit | SubmitController | Done


def next_step(record: HalvingRecord | None, stage: int) -> Step:
    """What the controller of ``stage`` does next, from the record alone (each step records that it
    began and that it is done, so that a restarted controller picks up where the first stopped and
    submits nothing twice): decide -> resubmit the kept -> submit the next stage's controller -> done.

    The last stage (``plan.last_stage``, to the final target) has no controller: nothing to do there.
    """
    if record is None or stage >= len(record.stages):
        return NotRecorded()
    plan, rec = record.plan, record.stages[stage]
    if stage >= plan.last_stage:
        return Done(f"stage {stage} trains to the final target {plan.final_target}; no controller ranks it")
    if not rec.is_decided:
        return Decide()
    if not rec.kept:
        return Done(f"{rung_label(plan, stage)}: no point completed the rung; nothing continues")
    if len(record.stages) == stage + 1:
        return Resubmit(tuple(rec.kept), plan.target(stage + 1), rec.resubmitting)
    nxt = record.stages[stage + 1]
    if stage + 1 < plan.last_stage and not nxt.controller:
        return SubmitController(stage + 1, tuple(arrays_of(nxt.job_ids)), nxt.controller_submitting)
    return Done(f"{rung_label(plan, stage)}: decided, resubmitted and the next stage's controller submitted")


def began_resubmit(record: HalvingRecord, stage: int, at: str) -> HalvingRecord:
    """The record once the resubmission of ``stage``'s kept points began at ``at`` (before sbatch)."""
    return record.with_stage(dataclasses.replace(record.stages[stage], resubmitting=at))


def resubmitted(record: HalvingRecord, stage: int, step: Resubmit, job_ids: list[str]) -> HalvingRecord:
    """The record once the kept points were resubmitted as ``job_ids``: the next stage, now trained."""
    nxt = HalvingStage(stage + 1, step.target, step.points, tuple(job_ids))
    return dataclasses.replace(record.with_stage(nxt), stage=stage + 1)


def began_controller(record: HalvingRecord, stage: int, at: str) -> HalvingRecord:
    """The record once the submission of ``stage``'s controller began at ``at`` (before sbatch)."""
    return record.with_stage(dataclasses.replace(record.stages[stage], controller_submitting=at))


def controller_submitted(record: HalvingRecord, stage: int, controller: str, restart: str) -> HalvingRecord:
    """The record with ``stage``'s controller and its restart job ids."""
    return record.with_stage(
        dataclasses.replace(record.stages[stage], controller=controller, controller_restart=restart)
    )
