"""What the job knows about the machine it runs on: CUDA, CPUs for Ray, the run folder's env summary.

Slurm's side (this task's id, allocation, nodes, GPUs, time left, requeue) is :mod:`grpokit.slurm`.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from typing import Any

from grpokit.slurm import gpus
from grpokit.slurm.task import JobEnv, slurm_env


def cuda_available() -> bool:
    """Whether a real CUDA GPU is present (Slurm's gres may schedule devices that are not GPUs)."""
    return gpus.cuda_available()


def cpus_for_ray(cluster_cpus: int | None) -> int:
    """CPUs given to Ray on each node: Slurm's count, else the config's, else this machine's."""
    slurm_cpus = JobEnv.from_env().cpus_on_node
    if slurm_cpus:
        return slurm_cpus
    if cluster_cpus:
        return int(cluster_cpus)
    return len(os.sched_getaffinity(0))


def summary() -> dict[str, Any]:
    """``env.json``: host, Python, the stack's versions, Slurm variables (no secrets)."""
    versions = {}
    for pkg in ("verl", "vllm", "ray", "torch", "transformers", "hydra-core", "submitit", "grpokit"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "versions": versions,
        "slurm": slurm_env(),
        "cuda_available": cuda_available(),
        "tmpdir": os.environ.get("TMPDIR"),
    }
