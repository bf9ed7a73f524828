"""This task, seen from inside its job: whether it runs under Slurm, its own id, its allocation.

Every ``SLURM_*`` variable the kit reads goes through :class:`JobEnv` (submitit's
``JobEnvironment`` habit): one frozen record built from an environment mapping
(``JobEnv.from_env()`` reads ``os.environ``; tests pass a dict). No other module reads them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
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


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class JobEnv:
    """This task's Slurm variables (sbatch(1)/srun(1), "OUTPUT ENVIRONMENT VARIABLES"), each None
    when unset (an integer that does not parse counts as unset).

    job_id: ``SLURM_JOB_ID`` (an array task's own job id). array_job_id, array_task_id:
    ``SLURM_ARRAY_JOB_ID``, ``SLURM_ARRAY_TASK_ID``. procid: ``SLURM_PROCID`` (0 unset).
    restart_count: ``SLURM_RESTART_COUNT`` (0 unset: the job's first run). nodelist, num_nodes:
    ``SLURM_JOB_NODELIST``, ``SLURM_JOB_NUM_NODES``. cpus_on_node: ``SLURM_CPUS_ON_NODE``.
    mem_per_node_mb, mem_per_cpu_mb: ``SLURM_MEM_PER_NODE``, ``SLURM_MEM_PER_CPU`` (MB).
    partition: ``SLURM_JOB_PARTITION``. nodename: ``SLURMD_NODENAME`` (this node, as Slurm names it).
    """

    job_id: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None
    procid: int = 0
    restart_count: int = 0
    nodelist: str | None = None
    num_nodes: int | None = None
    cpus_on_node: int | None = None
    mem_per_node_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    partition: str | None = None
    nodename: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> JobEnv:
        """The record of ``env`` (default ``os.environ``, read now)."""
        env = os.environ if env is None else env

        def text(name: str) -> str | None:
            return env.get(name) or None

        return cls(
            job_id=text("SLURM_JOB_ID"),
            array_job_id=text("SLURM_ARRAY_JOB_ID"),
            array_task_id=_int(env.get("SLURM_ARRAY_TASK_ID")),
            procid=_int(env.get("SLURM_PROCID")) or 0,
            restart_count=_int(env.get("SLURM_RESTART_COUNT")) or 0,
            nodelist=text("SLURM_JOB_NODELIST"),
            num_nodes=_int(env.get("SLURM_JOB_NUM_NODES")),
            cpus_on_node=_int(env.get("SLURM_CPUS_ON_NODE")),
            mem_per_node_mb=_int(env.get("SLURM_MEM_PER_NODE")),
            mem_per_cpu_mb=_int(env.get("SLURM_MEM_PER_CPU")),
            partition=text("SLURM_JOB_PARTITION"),
            nodename=text("SLURMD_NODENAME"),
        )

    @property
    def in_slurm(self) -> bool:
        """Whether this process runs in a Slurm job (``SLURM_JOB_ID`` is set)."""
        return self.job_id is not None

    @property
    def task_id(self) -> str | None:
        """This job's own Slurm id: ``<array job id>_<task id>`` in a job array, else ``SLURM_JOB_ID``.

        Every query or command that means "this task" uses it. In an array the placeholder task's
        ``SLURM_JOB_ID`` equals ``SLURM_ARRAY_JOB_ID``, so ``scontrol requeue $SLURM_JOB_ID`` would
        requeue every task of the array and ``squeue -j $SLURM_JOB_ID`` would list them all.
        None outside Slurm.
        """
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id

    @property
    def memory_mb(self) -> int | None:
        """The job's memory on this node (MB): ``SLURM_MEM_PER_NODE`` (``--mem``) wins; else
        ``SLURM_MEM_PER_CPU`` (``--mem-per-cpu`` or the partition's ``DefMemPerCPU``) x
        ``SLURM_CPUS_ON_NODE``. None when Slurm sets none; 0 (``--mem=0``: the whole node) counts as none."""
        if self.mem_per_node_mb:
            return self.mem_per_node_mb if self.mem_per_node_mb > 0 else None
        if self.mem_per_cpu_mb and self.cpus_on_node and self.mem_per_cpu_mb > 0 and self.cpus_on_node > 0:
            return self.mem_per_cpu_mb * self.cpus_on_node
        return None


def in_slurm() -> bool:
    """Whether this process runs in a Slurm job (``SLURM_JOB_ID`` is set)."""
    return JobEnv.from_env().in_slurm


def slurm_task_id() -> str | None:
    """This job's own Slurm id (:attr:`JobEnv.task_id`); None outside Slurm."""
    return JobEnv.from_env().task_id


def slurm_info() -> dict[str, Any]:
    """The allocation as ``status.json`` records it (empty outside Slurm): ``job_id``,
    ``array_job_id``, ``array_task_id`` (int), ``restart_count`` (int), ``nodelist``,
    ``partition``, ``gpus`` (count of :func:`~grpokit.slurm.gpus.visible_gpus`)."""
    job = JobEnv.from_env()
    if not job.in_slurm:
        return {}
    return {
        "job_id": job.job_id,
        "array_job_id": job.array_job_id,
        "array_task_id": job.array_task_id,
        "restart_count": job.restart_count,
        "nodelist": job.nodelist,
        "partition": job.partition,
        "gpus": len(visible_gpus()),
    }


def slurm_env() -> dict[str, str]:
    """The :data:`SLURM_VARS` that are set (``env.json``'s ``slurm``)."""
    return {k: os.environ[k] for k in SLURM_VARS if os.environ.get(k) is not None}
