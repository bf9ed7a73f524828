"""Submit one small job of a sweep that starts only after other jobs: the one way the kit does it.

Used by successive halving's controller (``afterany`` on the stage's arrays) and by the chained
evaluation (``afterok`` on one point's task). Slurm's ``--kill-on-invalid-dep=yes`` cancels such a
job as soon as its dependency can never be satisfied (``afterok`` on a task that failed), so none is
left pending forever with reason ``DependencyNeverSatisfied``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpokit.config.schema import ClusterConf
from grpokit.run_folder.layout import SweepFolder
from grpokit.submit import snapshot


def dependent_executor(
    sweep_dir: Path,
    *,
    cluster: ClusterConf,
    name: str,
    dependency: str,
    timeout_min: int,
    cpus_per_task: int = 1,
    gpus_per_node: int = 0,
    mem: str | None = "1GB",
    partition: str | None = None,
):
    """A ``submitit.SlurmExecutor`` for one dependent job of the sweep (one node, one task).

    Args:
        sweep_dir: the sweep folder: submitit's files go to its ``submitit/``, and the job runs its
            frozen code (:mod:`grpokit.submit.snapshot`).
        cluster: the points' ``cluster`` section: ``partition`` (unless ``partition`` is given),
            ``account``, ``qos`` and ``setup`` are taken from it.
        name: the Slurm job name.
        dependency: Slurm's ``--dependency`` value, e.g. ``afterok:120_3`` or ``afterany:120:121``
            (with ``--kill-on-invalid-dep=yes``).
        timeout_min: the time limit in minutes; ``cpus_per_task``, ``gpus_per_node``, ``mem``
            (submitit's ``"<n>GB"``; None: the partition's default): the request.
    """
    import submitit

    executor = submitit.SlurmExecutor(folder=str(SweepFolder(sweep_dir).submitit))
    params: dict[str, Any] = {
        "job_name": name,
        "partition": partition or cluster.partition,
        "time": int(timeout_min),
        "nodes": 1,
        "ntasks_per_node": 1,
        "cpus_per_task": int(cpus_per_task),
        "setup": list(cluster.setup or []),
        "additional_parameters": {"dependency": dependency, "kill-on-invalid-dep": "yes"},
    }
    if gpus_per_node:
        params["gpus_per_node"] = int(gpus_per_node)
    if mem:
        params["mem"] = mem
    for key in ("account", "qos"):
        if getattr(cluster, key):
            params[key] = getattr(cluster, key)
    executor.update_parameters(**params)
    snapshot.use(executor, Path(sweep_dir))  # the job runs the sweep's frozen code, as its points do
    return executor


def submit_dependent(sweep_dir: Path, fn: Callable, *args: Any, **request: Any) -> str:
    """Submit ``fn(*args)`` (picklable) as a dependent job (``request``: :func:`dependent_executor`'s
    keywords); returns its Slurm id.

    Raises:
        submitit.core.utils.FailedJobError: sbatch refused the job (its message holds sbatch's words).
    """
    return str(dependent_executor(sweep_dir, **request).submit(fn, *args).job_id)
