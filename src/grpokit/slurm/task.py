"""This task, seen from inside its job: whether it runs under Slurm, its own id, its allocation."""

from __future__ import annotations

import os
from typing import Any

from grpokit.slurm.gpus import visible_gpus

#: Slurm's variables ``env.json`` records (sbatch(1), "OUTPUT ENVIRONMENT VARIABLES").
SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_RESTART_COUNT",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_CPUS_ON_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_PARTITION",
    "SLURMD_NODENAME",
    "CUDA_VISIBLE_DEVICES",
)


def in_slurm() -> bool:
    """Whether this process runs in a Slurm job (``SLURM_JOB_ID`` is set)."""
    return bool(os.environ.get("SLURM_JOB_ID"))


def slurm_task_id() -> str | None:
    """This job's own Slurm id: ``<array job id>_<task id>`` in a job array, else ``SLURM_JOB_ID``.

    Every query or command that means "this task" uses it. In an array the placeholder task's
    ``SLURM_JOB_ID`` equals ``SLURM_ARRAY_JOB_ID``, so ``scontrol requeue $SLURM_JOB_ID`` would
    requeue every task of the array and ``squeue -j $SLURM_JOB_ID`` would list them all.
    None outside Slurm.
    """
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


def slurm_info() -> dict[str, Any]:
    """The allocation as ``status.json`` records it (empty outside Slurm): ``job_id``,
    ``array_job_id``, ``array_task_id`` (int), ``restart_count`` (int), ``nodelist``,
    ``partition``, ``gpus`` (count of :func:`~grpokit.slurm.gpus.visible_gpus`)."""
    env = os.environ
    if not in_slurm():
        return {}
    return {
        "job_id": env.get("SLURM_JOB_ID"),
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": int(env["SLURM_ARRAY_TASK_ID"]) if env.get("SLURM_ARRAY_TASK_ID") else None,
        "restart_count": int(env.get("SLURM_RESTART_COUNT", 0)),
        "nodelist": env.get("SLURM_JOB_NODELIST"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "gpus": len(visible_gpus()),
    }


def slurm_env() -> dict[str, str]:
    """The :data:`SLURM_VARS` that are set (``env.json``'s ``slurm``)."""
    return {k: os.environ[k] for k in SLURM_VARS if os.environ.get(k) is not None}
