"""Chained evaluation: per point, a job that runs after it, merges its final checkpoint and evaluates it.

    grpokit sweep -m cluster=slurm ... after=[merge,eval] [chain.limit=200] [chain.timeout_min=60]

- ``after`` names the steps (:data:`grpokit.config.schema.CHAIN_STEPS`: ``merge`` = ``grpokit
  merge`` of the final checkpoint into ``<run>/hf``; ``eval`` = ``grpokit serve-eval``, base vs
  trained on the point's test file, into ``<run>/eval/``); ``chain.*`` the job's request
  (:class:`grpokit.config.schema.ChainConf`). Checked before anything is submitted, one line each.
- Every submission of a point (the sweep, ``resume=true``, ``grpokit resubmit``: all go through
  :func:`grpokit.submit.dispatch.submit_slurm`) is followed by one chained job per point with
  ``--dependency=afterok:<the point's array task>`` and ``--kill-on-invalid-dep=yes``
  (:func:`grpokit.submit.dependent.submit_dependent`). A requeued task keeps its id, so the chain
  follows its last attempt; a resubmitted point gets a new id and a new chained job (the earlier
  one, whose task ended without success, was cancelled by Slurm; one still pending is cancelled
  here). A point whose job does not end with exit 0 never starts its chained job: Slurm cancels it
  (``DependencyNeverSatisfied``) and ``report.py`` says why.
- ``<sweep>/chain.json`` records the plan and each point's chained job: ``{"after": [step],
  "settings": {ChainConf}, "points": {name: {"job_id": str | null, "after": str, "submitted":
  iso8601, "refused": str (sbatch's words, only when refused), "history": [{"job_id", "after",
  "replaced"}]}}}``. The job itself writes ``<run>/chain_status.json``
  (:mod:`grpokit.evaluation.chained_job` has its format).

Chaining and successive halving do not combine (a halving point's job ends at each rung): the
sweep command refuses ``after`` with ``halving.rungs``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpokit.config.point import PointSpec
from grpokit.config.rehearsal_plan import rehearsal_chain_refusal
from grpokit.config.schema import ChainConf
from grpokit.rehearsal import ANSWER_SERVER_CMD as REHEARSAL_SERVER_CMD
from grpokit.run_folder import now, write_json_atomic
from grpokit.run_folder.layout import SweepFolder
from grpokit.slurm.scancel import scancel
from grpokit.submit.dependent import submit_dependent

log = logging.getLogger(__name__)

#: The module the chained job runs (``python -m``), named here without importing it.
JOB_MODULE = "grpokit.evaluation.chained_job"


class ChainError(ValueError):
    """An ``after`` / ``chain.*`` setting the kit refuses; ``str()`` is one line: key, what, fix."""


@dataclasses.dataclass(frozen=True)
class ChainPlan:
    """``after`` as steps in run order, and ``chain.*`` as :class:`ChainConf`."""

    steps: tuple[str, ...]
    settings: ChainConf

    def to_json(self) -> dict[str, Any]:
        return {"after": list(self.steps), "settings": dataclasses.asdict(self.settings)}


def plan_of(
    after: Any, section: Mapping | None, specs: list[PointSpec], swept: list[str], halving_on: bool
) -> ChainPlan | None:
    """The plan of the command's ``after`` and ``chain`` settings; None when ``after`` is empty.

    Raises:
        ChainError: an unknown step (with "did you mean"), ``after``/``chain.*`` swept, successive
            halving on, a point not on Slurm or without checkpoints, a rehearsal point whose trainer
            world is not one GPU (its checkpoint's real weights are a world-size-1 shard), naming the
            point and key.

    With ``rehearse=true`` and no ``chain.server_command``, ``eval`` serves both models with the
    rehearsal answer server (:data:`grpokit.rehearsal.ANSWER_SERVER_CMD`) instead of vLLM.
    """
    from omegaconf import OmegaConf

    if OmegaConf.is_config(after):
        after = OmegaConf.to_container(after, resolve=True)
    try:
        steps = ChainConf.steps_of(after)
        settings = ChainConf.of(section)
    except ValueError as exc:
        raise ChainError(str(exc)) from None
    if not steps:
        return None
    bad = [k for k in swept if k == "after" or k.startswith("chain.")]
    if bad:
        raise ChainError(f"{bad[0]} is swept; one sweep has one chain: give it one value (after=[merge,eval])")
    if halving_on:
        raise ChainError(
            "after with halving.rungs: chaining and successive halving do not combine (a halving point's job ends "
            "at every rung); run the chain on the survivors later: grpokit merge / grpokit serve-eval <run>"
        )
    for spec in specs:
        if spec.cluster.kind != "slurm":
            raise ChainError(
                f"[{spec.name}] after={list(steps)}: the chain is a Slurm job after each point's job; use a Slurm "
                "cluster (cluster=slurm or cluster=slurm_local), or run grpokit merge / serve-eval here afterwards"
            )
        if int(spec.verl_value("trainer.save_freq") or -1) <= 0:
            raise ChainError(
                f"[{spec.name}] verl.trainer.save_freq: merge needs the final checkpoint, which verl writes only "
                "with trainer.save_freq > 0; set verl.trainer.save_freq > 0"
            )
        if spec.runtime.rehearsal:
            world = (int(spec.verl_value("trainer.nnodes") or 1), int(spec.verl_value("trainer.n_gpus_per_node") or 1))
            refusal = rehearsal_chain_refusal(spec.name, steps, *world)
            if refusal:
                raise ChainError(refusal)
    if any(spec.runtime.rehearsal for spec in specs) and "eval" in steps and not settings.server_command:
        # rehearse=true: base and merged model served by the rehearsal answer server, not vLLM (no GPU)
        settings = dataclasses.replace(settings, server_command=list(REHEARSAL_SERVER_CMD))
    return ChainPlan(steps, settings)


def read_chain(sweep_dir: Path) -> dict[str, Any] | None:
    """``<sweep>/chain.json`` (None without one)."""
    path = SweepFolder(sweep_dir).chain
    return json.loads(path.read_text()) if path.exists() else None


def record_plan(sweep_dir: Path, plan: ChainPlan | None) -> None:
    """Write the command's plan into ``chain.json`` before its points are submitted (the points'
    earlier chained jobs are kept). Nothing is written for a sweep that never chained."""
    state = read_chain(sweep_dir)
    if plan is None and state is None:
        return
    state = state or {"points": {}}
    state.update(plan.to_json() if plan else {"after": [], "settings": state.get("settings", {})})
    write_json_atomic(SweepFolder(sweep_dir).chain, state)


def job_argv(run_dir: str, plan: Mapping[str, Any]) -> list[str]:
    """The chained job's command: ``python -m grpokit.evaluation.chained_job <run> --steps ...``."""
    settings = ChainConf.of(plan.get("settings"))
    argv = [sys.executable, "-m", JOB_MODULE, str(run_dir), "--steps", ",".join(plan["after"])]
    if settings.limit is not None:
        argv += ["--limit", str(settings.limit)]
    argv += ["--max-tokens", str(settings.max_tokens)]
    if settings.server_command:
        argv += ["--server-command", json.dumps(list(settings.server_command))]
    return argv


class ChainJob:
    """``ChainJob()(argv) -> 0``: the callable submitit pickles; runs ``argv`` (:func:`job_argv`) and
    raises when it exits non-zero, so Slurm records the chained job FAILED."""

    def __call__(self, argv: list[str]) -> int:
        code = subprocess.call(argv)
        if code != 0:
            raise RuntimeError(f"chained job exited {code}; see the run folder's chain_status.json")
        return 0


def follow(sweep_dir: Path, specs: list[PointSpec], job_ids: list[str]) -> dict[str, str | None]:
    """After a submission of ``specs`` (Slurm ids ``job_ids``): submit each point's chained job when
    the sweep chains (``chain.json`` with steps); returns ``{point name: chained job id | None}``.

    A refused chained job does not undo the points (they are queued and valuable): sbatch's words go
    to ``chain.json`` (``refused``) and to stderr, and ``report.py`` shows the point's chain as
    ``not_submitted``. Runs under the sweep folder's claim (the callers hold it).
    """
    from grpokit.submit.arrays import slurm_said

    state = read_chain(sweep_dir)
    if not state or not state.get("after") or not specs:
        return {}
    settings = ChainConf.of(state.get("settings"))
    out: dict[str, str | None] = {}
    points = state.setdefault("points", {})
    for spec, job_id in zip(specs, job_ids, strict=True):
        old = points.get(spec.name)
        history = list((old or {}).get("history", []))
        if old and old.get("job_id"):
            scancel([old["job_id"]])  # pending on a task that will never succeed (Slurm may have cancelled it)
            history.append({"job_id": old["job_id"], "after": old.get("after"), "replaced": now()})
        record: dict[str, Any] = {"job_id": None, "after": job_id, "submitted": now(), "history": history}
        try:
            record["job_id"] = submit_dependent(
                Path(sweep_dir),
                ChainJob(),
                job_argv(spec.run_dir, state),
                cluster=spec.cluster,
                name=f"{spec.sweep_name}-chain",
                dependency=f"afterok:{job_id}",
                timeout_min=settings.timeout_min,
                cpus_per_task=settings.cpus_per_task,
                gpus_per_node=settings.gpus_per_node,
                mem_gb=settings.mem_gb,
                partition=settings.partition,
            )
        except Exception as exc:  # submitit's FailedJobError, OSError (no sbatch)
            record["refused"] = slurm_said(exc)
            print(f"[{spec.name}] chained job refused by Slurm: {record['refused']}", file=sys.stderr)
        points[spec.name] = record
        out[spec.name] = record["job_id"]
    write_json_atomic(SweepFolder(sweep_dir).chain, state)
    ids = [j for j in out.values() if j]
    if ids:
        print(f"chained {','.join(state['after'])} after each point (afterok): job(s) {', '.join(ids)}")
    return out
