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
from grpokit.slurm import executor
from grpokit.submit import snapshot


def dependent_executor(sweep_dir: Path, *, cluster: ClusterConf, **request: Any):
    """A ``submitit.SlurmExecutor`` for one dependent job of the sweep (one node, one task).

    Args:
        sweep_dir: the sweep folder: submitit's files go to its ``submitit/``, and the job runs its
            frozen code (:mod:`grpokit.submit.snapshot`).
        cluster: the points' ``cluster`` section.
        request: :func:`grpokit.slurm.executor.dependent_parameters`' keywords (``name``,
            ``dependency``, ``timeout_min``, ``cpus_per_task``, ``gpus_per_node``, ``mem_gb``,
            ``partition``): the kit's one mapping of settings to submitit's Slurm parameters.
    """
    params = executor.dependent_parameters(cluster, **request)
    job = executor.new_executor(SweepFolder(sweep_dir).submitit, params)
    snapshot.use(job, Path(sweep_dir))  # the job runs the sweep's frozen code, as its points do
    return job


def submit_dependent(sweep_dir: Path, fn: Callable, *args: Any, **request: Any) -> str:
    """Submit ``fn(*args)`` (picklable) as a dependent job (``request``: :func:`dependent_executor`'s
    keywords); returns its Slurm id.

    Raises:
        submitit.core.utils.FailedJobError: sbatch refused the job (its message holds sbatch's words).
    """
    return str(dependent_executor(sweep_dir, **request).submit(fn, *args).job_id)
