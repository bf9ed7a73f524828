"""Successive halving of a sweep: every point trains to a first rung, only the best continue.

    grpokit sweep -m ... verl.trainer.total_training_steps=6 halving.rungs=[2,4] halving.keep=0.5

- At submission every point's ``trainer.total_training_steps`` is set to the first rung (its
  ``point.json`` says so); the original value is the last stage's target. verl saves at its last
  step, so each point ends ``completed`` at the rung with a checkpoint of it.
- With the array the kit submits a small controller job (``--dependency=afterany:<array ids>``, one
  CPU, no GPU; no daemon on the login node), and its one restart (``afternotok`` on it: it runs
  only if the controller failed or its node was lost; the controller is idempotent per stage). It
  ranks the points that completed the rung by ``halving.metric`` (its last value at or before the
  rung step, from the run folders' merged ``metrics.jsonl``; ``val_acc``: the first
  ``val-core/<data_source>/acc/mean@1``), keeps the best ``max(1, floor(keep x points of the
  stage))`` and resubmits them (``resubmit.json``, the next rung as target; verl resumes from the
  rung's checkpoint); the others end ``pruned`` with the reason (``rung 1 (step 2): rank 5/8 by
  val_acc 0.41 < cut 0.47 ...``). It then submits the next controller; after the last rung the
  survivors run to the original target.
- ``<sweep>/halving.json`` records the plan and every stage's decision: ``{"rungs": [int], "keep":
  float, "metric": str, "mode": "max" | "min", "final_target": int, "stage": int (the stage being
  trained), "stages": [{"stage": int, "target": int, "points": [name], "job_ids": [str],
  "controller": str | null, "controller_restart": str | null, "ranked": [{"name", "value", "rank"}],
  "kept": [name], "pruned": [name], "out": {name: state}, "metric_key": str, "decided": iso8601,
  "resubmitting": iso8601, "controller_submitting": iso8601}]}`` (the last two: a step begun, so
  that a restarted controller never submits twice).

Points that did not complete a rung (failed, pruned by ``runtime.pruning``, cancelled) keep their
state and take no place among the kept. Note that verl's learning-rate schedule is computed from
``total_training_steps``: with a warm-up or decay schedule each stage's run sees a schedule for its own
target (verl's default, a constant rate, is unaffected).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpokit.config.point import PointSpec
from grpokit.config.schema import ClusterConf
from grpokit.run_folder.layout import HALVING, RunFolder
from grpokit.submit.dependent import dependent_executor

log = logging.getLogger(__name__)

HALVING_FILE = HALVING
TARGET_KEY = "trainer.total_training_steps"
VAL_ACC = "val_acc"


class HalvingError(ValueError):
    """A halving setting the kit refuses; ``str()`` is one line: key, what, fix."""


@dataclasses.dataclass(frozen=True)
class HalvingPlan:
    """``halving.*`` of the sweep command. rungs: steps (increasing); keep: fraction in (0, 1);
    metric: a verl metric key or ``val_acc``; mode: ``max`` (higher is better) or ``min``."""

    rungs: tuple[int, ...]
    keep: float
    metric: str
    mode: str
    final_target: int

    def target(self, stage: int) -> int:
        """Stage k trains to rung k; the stage after the last rung to the final target."""
        return self.rungs[stage] if stage < len(self.rungs) else self.final_target

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "rungs": list(self.rungs)}


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
    section = dict(section or {})
    rungs = section.get("rungs")
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
    keep = section.get("keep", 0.5)
    if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0 < keep < 1:
        raise HalvingError(f"halving.keep={keep!r}: must be a fraction in (0, 1), e.g. 0.5 (keep the better half)")
    mode = str(section.get("mode", "max"))
    if mode not in ("max", "min"):
        raise HalvingError(f"halving.mode={mode!r}: must be max (higher is better) or min")
    metric = str(section.get("metric") or VAL_ACC)
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


# -- ranking -----------------------------------------------------------------------------------------
def metric_at(run_dir: Path, metric: str, step: int) -> tuple[str, float | None]:
    """``(metric key, value)``: its last logged value at or before ``step`` in the run's merged
    series (``val_acc``: the first ``val-core/<data_source>/acc/mean@1``); value None when absent."""
    from grpokit.run_folder.metrics import merge_attempts, val_acc_keys

    df = merge_attempts(run_dir)
    key = metric
    if metric == VAL_ACC:
        keys = val_acc_keys(df.columns)
        key = keys[0] if keys else "val-core/<data_source>/acc/mean@1"
    if key not in df.columns:
        return key, None
    values = df.loc[df["step"] <= step, key].dropna()
    return key, (float(values.iloc[-1]) if len(values) else None)


@dataclasses.dataclass(frozen=True)
class Ranked:
    name: str
    value: float | None
    rank: int


def decide(
    values: dict[str, float | None], order: list[str], stage_size: int, plan: HalvingPlan
) -> tuple[list[Ranked], int]:
    """Rank the points that completed the rung (best first; no value ranks last; ties keep the sweep
    order ``order``) and the number kept: ``max(1, floor(keep x stage_size))``."""
    sign = -1.0 if plan.mode == "max" else 1.0

    def key(name: str):
        v = values[name]
        return (v is None or math.isnan(v), sign * v if v is not None and not math.isnan(v) else 0.0, order.index(name))

    names = sorted(values, key=key)
    kept = max(1, math.floor(plan.keep * stage_size + 1e-9))
    return [Ranked(n, values[n], i + 1) for i, n in enumerate(names)], min(kept, len(names))


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


# -- the controller job ---------------------------------------------------------------------------------
def read_halving(sweep_dir: Path) -> dict[str, Any] | None:
    path = Path(sweep_dir) / HALVING_FILE
    return json.loads(path.read_text()) if path.exists() else None


def _plan(state: Mapping) -> HalvingPlan:
    return HalvingPlan(tuple(state["rungs"]), state["keep"], state["metric"], state["mode"], state["final_target"])


def _slurm_clean_env() -> None:
    """Drop the controller job's own Slurm variables before it calls sbatch: sbatch reads
    ``SLURM_*``/``SBATCH_*`` input variables (e.g. ``SLURM_MEM_PER_CPU`` conflicts with ``--mem``)."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "SBATCH_")) and name != "SLURM_CONF":
            del os.environ[name]


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
    """After the sweep's submission: write ``halving.json`` and submit the first controller."""
    from grpokit.run_folder import write_json_atomic
    from grpokit.run_folder.claim import open_existing
    from grpokit.run_folder.manifest import read_manifest

    sweep_dir = Path(sweep_dir)
    with open_existing(sweep_dir) as claim:
        points = read_manifest(sweep_dir)["points"]
        job_ids = [p["job_id"] for p in points]
        arrays = list(dict.fromkeys(str(j).split("_")[0] for j in job_ids if j))
        controller, restart = submit_controller(sweep_dir, specs[0].cluster, arrays, 0)
        state = {
            **plan.to_json(),
            "stage": 0,
            "stages": [
                {"stage": 0, "target": plan.target(0), "points": [p["name"] for p in points], "job_ids": job_ids}
            ],
        }
        state["stages"][0].update(controller=controller, controller_restart=restart)
        write_json_atomic(sweep_dir / HALVING_FILE, state)
        claim.record("halving-controller", [], [controller, restart], stage=0, after=arrays)
    print(
        f"successive halving: rungs {list(plan.rungs)} then {plan.final_target} steps, keep {plan.keep:g} "
        f"by {plan.metric} ({plan.mode}); controller job {controller} runs after array(s) {', '.join(arrays)} "
        f"(restarted once as job {restart} if it fails)"
    )
    return controller


def _prune(run_dir: Path, reason: str, halving: dict[str, Any]) -> None:
    """Mark a point that completed its rung ``pruned`` (a final state) with the reason; a point
    already pruned by this stage (a restarted controller) is left as it is."""
    from grpokit.run_folder import RunFolder, now, read_status, write_json_atomic

    path = RunFolder(run_dir).status
    status = read_status(run_dir)
    if status.get("state") == "pruned" and status.get("halving") == halving:
        return
    status.update(state="pruned", reason=reason, halving=halving, updated=now())
    write_json_atomic(path, status)


def _queued_since(job_name: str, since: str) -> list[str]:
    """Ids of this user's jobs named ``job_name`` that Slurm submitted at or after ``since`` (ISO time),
    as ``squeue`` still shows them (this cluster keeps no accounting; ``squeue`` shows finished
    jobs for ``MinJobAge``). Raises ``RuntimeError`` when ``squeue`` fails."""
    import datetime as dt
    import subprocess

    out = subprocess.run(
        ["squeue", "-h", "--me", "--name", job_name, "-t", "all", "-o", "%i|%V"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed: {out.stderr.strip()}")
    after = dt.datetime.fromisoformat(since).astimezone().replace(tzinfo=None, microsecond=0)
    ids = []
    for line in out.stdout.split():
        job, _, submitted = line.partition("|")
        with contextlib.suppress(ValueError):
            if dt.datetime.fromisoformat(submitted) >= after:
                ids.append(job)
    return ids


def advance(sweep_dir: Path, stage: int) -> dict[str, Any]:
    """The controller of ``stage``: rank, prune, resubmit the kept with the next target, submit the
    next controller. Returns the stage's record.

    Idempotent, so that a restarted controller (:func:`submit_controller`) or any second run of
    the same stage finishes what the first left, and submits nothing twice: the decision is
    written to ``halving.json`` before anything acts on it, each step records that it is done
    (``resubmitting`` before sbatch, the job ids right after), and a run that finds
    ``resubmitting`` without job ids refuses to submit when ``squeue`` shows the sweep's jobs
    submitted since (:class:`HalvingError`, naming them).
    """
    from grpokit.run_folder import now, read_status, write_json_atomic
    from grpokit.run_folder.claim import open_existing
    from grpokit.run_folder.manifest import MANIFEST, read_manifest, replace_job_ids
    from grpokit.runtime import resubmission
    from grpokit.submit.arrays import submit_arrays

    sweep_dir = Path(sweep_dir)
    path = sweep_dir / HALVING_FILE
    with open_existing(sweep_dir) as claim:
        state = read_halving(sweep_dir)
        if state is None or stage >= len(state["stages"]):
            log.warning("halving stage %d of %s is not recorded; nothing to do", stage, sweep_dir)
            return {}
        plan = _plan(state)
        record = state["stages"][stage]
        manifest = read_manifest(sweep_dir)
        entries = {p["name"]: p for p in manifest["points"]}
        target = plan.target(stage)
        rung = f"rung {stage + 1} (step {target})"
        if record.get("kept") is None:  # 1. decide, and record the decision before acting on it
            values: dict[str, float | None] = {}
            out: dict[str, str] = {}
            key_used = plan.metric
            for name in record["points"]:
                run_dir = Path(entries[name]["run_dir"])
                status = read_status(run_dir)
                if status.get("state") != "completed" or status.get("last_step") != target:
                    out[name] = str(status.get("state") or "pending")
                    continue
                key_used, values[name] = metric_at(run_dir, plan.metric, target)
            ranked, n_keep = decide(values, record["points"], len(record["points"]), plan)
            record.update(
                metric_key=key_used,
                ranked=[dataclasses.asdict(r) for r in ranked],
                kept=[r.name for r in ranked[:n_keep]],
                pruned=[r.name for r in ranked[n_keep:]],
                out=out,
                decided=now(),
            )
            write_json_atomic(path, state)
        else:
            log.warning("%s of %s was decided at %s: finishing what is left", rung, sweep_dir, record["decided"])
        ranked = [Ranked(**r) for r in record["ranked"]]
        kept, n_keep = record["kept"], len(record["kept"])
        cut = ranked[n_keep - 1].value if ranked and n_keep else None
        key_used = record["metric_key"]
        label = plan.metric if plan.metric == key_used else f"{plan.metric} ({key_used})"
        for r in ranked[n_keep:]:  # 2. prune (a point already pruned by this stage is left as it is)
            reason = (
                f"{rung}: rank {r.rank}/{len(ranked)} by {label} {_fmt(r.value)} "
                f"{'<' if plan.mode == 'max' else '>'} cut {_fmt(cut)} (kept {n_keep} of {len(record['points'])}, "
                f"halving.keep={plan.keep:g})"
            )
            _prune(Path(entries[r.name]["run_dir"]), reason, {"stage": stage, "rung": target, "rank": r.rank})
        log.info("%s: kept %s; pruned %s; out %s", rung, kept, record["pruned"], record["out"])
        next_target = plan.target(stage + 1)
        if kept and len(state["stages"]) == stage + 1:  # 3. resubmit the kept, once
            sweep_name = PointSpec.from_json(RunFolder(Path(entries[kept[0]]["run_dir"])).point.read_text()).sweep_name
            if record.get("resubmitting"):
                queued = _queued_since(sweep_name, record["resubmitting"])
                if queued:
                    raise HalvingError(
                        f"{rung} of {sweep_dir}: an earlier controller started resubmitting at "
                        f"{record['resubmitting']} and Slurm holds job(s) {', '.join(queued)} of the sweep since; "
                        f"not submitting twice. Check squeue --name {sweep_name}; to continue, record them in "
                        f"{path} or resubmit the kept points ({', '.join(kept)}) with grpokit resubmit"
                    )
            specs = []
            for name in kept:
                run_dir = Path(entries[name]["run_dir"])
                spec = with_target(PointSpec.from_json(RunFolder(run_dir).point.read_text()), next_target)
                RunFolder(run_dir).point.write_text(spec.to_json())
                resubmission.request(run_dir)
                specs.append(spec)
            record["resubmitting"] = now()
            write_json_atomic(path, state)
            _slurm_clean_env()
            ids = submit_arrays(sweep_dir / "submitit", specs, name=specs[0].sweep_name)
            state["stages"].append(
                {"stage": stage + 1, "target": next_target, "points": kept, "job_ids": list(ids), "controller": None}
            )
            state["stage"] = stage + 1
            write_json_atomic(path, state)
            claim.record("halving", kept, list(ids), stage=stage + 1, target=next_target)
            replace_job_ids(
                manifest,
                {entries[n]["index"]: (j, f"completed (rung {stage + 1})") for n, j in zip(kept, ids, strict=True)},
            )
            write_json_atomic(sweep_dir / MANIFEST, manifest)
        nxt = state["stages"][stage + 1] if len(state["stages"]) > stage + 1 else None
        if nxt is not None and stage + 1 < len(plan.rungs) and not nxt.get("controller"):  # 4. the next controller
            if nxt.get("controller_submitting"):
                queued = _queued_since(f"{sweep_dir.name}-halving", nxt["controller_submitting"])
                if queued:
                    raise HalvingError(
                        f"{rung} of {sweep_dir}: an earlier controller started submitting the next one at "
                        f"{nxt['controller_submitting']} and Slurm holds controller job(s) {', '.join(queued)} "
                        f"since; not submitting twice (record it in {path} as stages[{stage + 1}].controller)"
                    )
            nxt["controller_submitting"] = now()
            write_json_atomic(path, state)
            arrays = list(dict.fromkeys(str(j).split("_")[0] for j in nxt["job_ids"]))
            cluster = PointSpec.from_json(RunFolder(Path(entries[kept[0]]["run_dir"])).point.read_text()).cluster
            nxt["controller"], nxt["controller_restart"] = submit_controller(sweep_dir, cluster, arrays, stage + 1)
            write_json_atomic(path, state)
            claim.record(
                "halving-controller", [], [nxt["controller"], nxt["controller_restart"]], stage=stage + 1, after=arrays
            )
        return record


class HalvingController:
    """``HalvingController()(sweep_dir, stage)``: the controller job's callable (pickled by submitit)."""

    def __call__(self, sweep_dir: str, stage: int) -> dict[str, Any]:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        record = advance(Path(sweep_dir), stage)
        print(json.dumps(record, indent=2, default=str), file=sys.stdout, flush=True)
        return record
