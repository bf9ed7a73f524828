"""Successive halving of a sweep: every point trains to a first rung, only the best continue.

    grpokit sweep -m ... verl.trainer.total_training_steps=6 halving.rungs=[2,4] halving.keep=0.5

- At submission every point's ``trainer.total_training_steps`` is set to the first rung (its
  ``point.json`` says so); the original value is the last stage's target. verl saves at its last
  step, so each point ends ``completed`` at the rung with a checkpoint of it.
- With the array the kit submits a small controller job (``--dependency=afterany:<array ids>``, one
  CPU, no GPU; no daemon on the login node). It ranks the points that completed the rung by
  ``halving.metric`` (its last value at or before the rung step, from the run folders' merged
  ``metrics.jsonl``; ``val_acc``: the first ``val-core/<data_source>/acc/mean@1``), keeps the best
  ``max(1, floor(keep x points of the stage))`` and resubmits them (``resubmit.json``, the next
  rung as target; verl resumes from the rung's checkpoint); the others end ``pruned`` with the
  reason (``rung 1 (step 2): rank 5/8 by val_acc 0.41 < cut 0.47 ...``). It then submits the next
  controller; after the last rung the survivors run to the original target.
- ``<sweep>/halving.json`` records the plan and every stage's decision: ``{"rungs": [int], "keep":
  float, "metric": str, "mode": "max" | "min", "final_target": int, "stage": int (the stage being
  trained), "stages": [{"stage": int, "target": int, "points": [name], "job_ids": [str],
  "controller": str | null, "ranked": [{"name", "value", "rank"}], "kept": [name], "pruned": [name],
  "out": {name: state}}]}``.

Points that did not complete a rung (failed, pruned by ``runtime.pruning``, cancelled) keep their
state and take no place among the kept. Note that verl's learning-rate schedule is computed from
``total_training_steps``: with a warm-up or decay schedule each stage's run sees a schedule for its own
target (verl's default, a constant rate, is unaffected).
"""

from __future__ import annotations

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
from grpokit.run_folder.layout import HALVING, RunFolder
from grpokit.submit import snapshot

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


def plan_of(section: Mapping | None, specs: list[PointSpec], swept: list[str], opts: Mapping) -> HalvingPlan | None:
    """The plan of the command's ``halving`` section; None when ``halving.rungs`` is unset.

    Raises:
        HalvingError: a bad value, a swept ``halving.*`` key, or a point that cannot take part
            (no ``trainer.total_training_steps`` above the last rung, no checkpoints, no validation
            for ``val_acc``, not on Slurm, ``resume``/``wait``), naming the point and key.
    """
    section = dict(section or {})
    rungs = section.get("rungs")
    if rungs in (None, "null", []):
        return None
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
        if spec.cluster.get("kind") != "slurm":
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


def submit_controller(sweep_dir: Path, cluster: Mapping, after: list[str], stage: int) -> str:
    """Submit the controller of ``stage`` (its points' arrays ``after``); returns its Slurm id."""
    import submitit

    executor = submitit.SlurmExecutor(folder=str(Path(sweep_dir) / "submitit"))
    params: dict[str, Any] = {
        "job_name": f"{Path(sweep_dir).name}-halving",
        "partition": cluster.get("partition"),
        "time": 10,
        "nodes": 1,
        "ntasks_per_node": 1,
        "cpus_per_task": 1,
        "mem": "1GB",
        "setup": list(cluster.get("setup") or []),
        "additional_parameters": {"dependency": "afterany:" + ":".join(after), "kill-on-invalid-dep": "yes"},
    }
    for key in ("account", "qos"):
        if cluster.get(key):
            params[key] = cluster[key]
    executor.update_parameters(**params)
    snapshot.use(executor, Path(sweep_dir))  # the controller runs the sweep's frozen code, as its points do
    job = executor.submit(HalvingController(), str(sweep_dir), stage)
    return str(job.job_id)


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
        controller = submit_controller(sweep_dir, specs[0].cluster, arrays, 0)
        state = {
            **plan.to_json(),
            "stage": 0,
            "stages": [
                {"stage": 0, "target": plan.target(0), "points": [p["name"] for p in points], "job_ids": job_ids}
            ],
        }
        state["stages"][0]["controller"] = controller
        write_json_atomic(sweep_dir / HALVING_FILE, state)
        claim.record("halving-controller", [], [controller], stage=0, after=arrays)
    print(
        f"successive halving: rungs {list(plan.rungs)} then {plan.final_target} steps, keep {plan.keep:g} "
        f"by {plan.metric} ({plan.mode}); controller job {controller} runs after array(s) {', '.join(arrays)}"
    )
    return controller


def _prune(run_dir: Path, reason: str, halving: dict[str, Any]) -> None:
    """Mark a point that completed its rung ``pruned`` (a final state) with the reason."""
    from grpokit.run_folder import RunFolder, now, read_status, write_json_atomic

    path = RunFolder(run_dir).status
    status = read_status(run_dir)
    status.update(state="pruned", reason=reason, halving=halving, updated=now())
    write_json_atomic(path, status)


def advance(sweep_dir: Path, stage: int) -> dict[str, Any]:
    """The controller of ``stage``: rank, prune, resubmit the kept with the next target, submit the
    next controller. Returns the stage's record. Runs once per stage: a second run (a requeue of
    the controller) finds ``halving.json`` past the stage and does nothing."""
    from grpokit.run_folder import now, read_status, write_json_atomic
    from grpokit.run_folder.claim import open_existing
    from grpokit.run_folder.manifest import MANIFEST, read_manifest, replace_job_ids
    from grpokit.runtime import resubmission
    from grpokit.submit.arrays import submit_arrays

    sweep_dir = Path(sweep_dir)
    with open_existing(sweep_dir) as claim:
        state = read_halving(sweep_dir)
        if state is None or state["stage"] != stage or state["stages"][stage].get("kept") is not None:
            log.warning("halving stage %d of %s already decided; nothing to do", stage, sweep_dir)
            return (state or {}).get("stages", [{}])[min(stage, len((state or {}).get("stages", [1])) - 1)]
        plan = _plan(state)
        record = state["stages"][stage]
        manifest = read_manifest(sweep_dir)
        entries = {p["name"]: p for p in manifest["points"]}
        target = plan.target(stage)
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
        kept = [r.name for r in ranked[:n_keep]]
        cut = ranked[n_keep - 1].value if ranked else None
        label = plan.metric if plan.metric == key_used else f"{plan.metric} ({key_used})"
        rung = f"rung {stage + 1} (step {target})"
        pruned = []
        for r in ranked[n_keep:]:
            reason = (
                f"{rung}: rank {r.rank}/{len(ranked)} by {label} {_fmt(r.value)} "
                f"{'<' if plan.mode == 'max' else '>'} cut {_fmt(cut)} (kept {n_keep} of {len(record['points'])}, "
                f"halving.keep={plan.keep:g})"
            )
            _prune(Path(entries[r.name]["run_dir"]), reason, {"stage": stage, "rung": target, "rank": r.rank})
            pruned.append(r.name)
        record.update(
            metric_key=key_used,
            ranked=[dataclasses.asdict(r) for r in ranked],
            kept=kept,
            pruned=pruned,
            out=out,
            decided=now(),
        )
        log.info("%s: kept %s; pruned %s; out %s", rung, kept, pruned, out)
        next_target = plan.target(stage + 1)
        if kept:
            specs = []
            for name in kept:
                run_dir = Path(entries[name]["run_dir"])
                spec = with_target(PointSpec.from_json(RunFolder(run_dir).point.read_text()), next_target)
                RunFolder(run_dir).point.write_text(spec.to_json())
                resubmission.request(run_dir)
                specs.append(spec)
            _slurm_clean_env()
            ids = submit_arrays(sweep_dir / "submitit", specs, name=specs[0].sweep_name)
            replace_job_ids(
                manifest,
                {entries[n]["index"]: (j, f"completed (rung {stage + 1})") for n, j in zip(kept, ids, strict=True)},
            )
            write_json_atomic(sweep_dir / MANIFEST, manifest)
            claim.record("halving", kept, list(ids), stage=stage + 1, target=next_target)
            nxt = {"stage": stage + 1, "target": next_target, "points": kept, "job_ids": list(ids), "controller": None}
            if stage + 1 < len(plan.rungs):
                arrays = list(dict.fromkeys(str(j).split("_")[0] for j in ids))
                nxt["controller"] = submit_controller(sweep_dir, specs[0].cluster, arrays, stage + 1)
                claim.record("halving-controller", [], [nxt["controller"]], stage=stage + 1, after=arrays)
            state["stages"].append(nxt)
            state["stage"] = stage + 1
        write_json_atomic(sweep_dir / HALVING_FILE, state)
        return record


class HalvingController:
    """``HalvingController()(sweep_dir, stage)``: the controller job's callable (pickled by submitit)."""

    def __call__(self, sweep_dir: str, stage: int) -> dict[str, Any]:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        record = advance(Path(sweep_dir), stage)
        print(json.dumps(record, indent=2, default=str), file=sys.stdout, flush=True)
        return record
