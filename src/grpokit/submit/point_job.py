"""The callable submitit pickles for each array task: run one point with the in-job driver."""

from __future__ import annotations

from grpokit.slurm.task import JobEnv


class RunPointTask:
    """``RunPointTask()(spec_json) -> exit code``. Plain data in, so it always pickles.

    It runs in the job's batch step on the first node (``use_srun=False``, see
    :func:`grpokit.slurm.executor.executor_parameters`) and drives the whole job: the Ray workers on
    the other nodes are started by the driver itself through ``srun --overlap``. Should it ever be
    started once per task (through ``srun``), only task 0 drives and the others return at once.
    """

    def __call__(self, spec_json: str) -> int:
        if JobEnv.from_env().procid != 0:
            return 0
        from grpokit.runtime.driver import run_point

        code = run_point(spec_json)
        if code != 0:
            # Slurm then records the job as FAILED, as it would for a failing sbatch script.
            raise PointFailed(f"point failed (driver exit code {code}); see its run folder's status.json")
        return code


class PointFailed(RuntimeError):
    """The in-job driver ended the point as failed."""
