"""The batch script Slurm receives is the one grpokit.slurm.sbatch renders (and dry_run.md shows).

A 2-point array goes to the local cluster held (``--hold``: it must never run, there is no trainer
here), and the submission file submitit handed to sbatch is compared byte for byte with the renderer's
text for the same point; Slurm's own record of the job shows the request (time limit, array).
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from grpokit.config.point import PointSpec
from grpokit.slurm import sbatch
from grpokit.slurm.executor import executor_parameters

pytestmark = pytest.mark.slurm


def test_the_submitted_batch_script_is_the_rendered_one(slurm, tmp_path, bare_point):
    from grpokit.submit.arrays import submit_arrays

    name = f"render{uuid.uuid4().hex[:6]}"
    cluster = {
        "kind": "slurm",
        "partition": "gpu",
        "nodes": 1,
        "gpus_per_node": 1,
        "cpus_per_task": 1,
        "mem_gb": 1,
        "array_parallelism": 2,
        # hold: the array must stay queued until it is cancelled, never run (no trainer here)
        "additional_parameters": {"hold": True},
    }

    def spec(i: int) -> PointSpec:
        return bare_point(tmp_path, i, cluster, name)

    folder = tmp_path / "submitit"
    ids = submit_arrays(folder, [spec(0), spec(1)], name=name, max_size=64)
    array = ids[0].split("_")[0]
    try:
        (script,) = folder.glob(f"{array}*_submission.sh")
        params = executor_parameters(spec(0).cluster, name=name, num_points=2)
        command = script.read_text().split("export SUBMITIT_EXECUTOR=slurm\n", 1)[1].splitlines()[0]
        assert command.endswith(f"-u -m submitit.core._submit {folder}")  # submitit's python, its folder
        assert script.read_text() == sbatch.render(params, map_count=2, folder=str(folder), command=command)
        fields = subprocess.run(
            ["scontrol", "show", "job", "-o", ids[0]], capture_output=True, text=True, timeout=30
        ).stdout
        assert f"JobName={name}" in fields and "TimeLimit=01:00:00" in fields and "Requeue=1" in fields
    finally:
        subprocess.run(["scancel", array], capture_output=True, timeout=30, check=False)
