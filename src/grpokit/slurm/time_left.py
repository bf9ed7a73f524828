"""This task's time left before its time limit, as Slurm counts it."""

from __future__ import annotations

import subprocess

from grpokit.slurm import runner
from grpokit.slurm.task import slurm_task_id
from grpokit.slurm.times import parse_time_s


def time_left_s(timeout_s: float = 10) -> float | None:
    """Seconds this task has left before its time limit (``squeue -h -j <own id> -o %L``).

    Never a sibling's: the id is the task's own (:func:`~grpokit.slurm.task.slurm_task_id`).
    None outside Slurm, when squeue fails or answers nothing parseable (``UNLIMITED``, ``INVALID``).
    """
    task = slurm_task_id()
    if not task:
        return None
    try:
        cmd = ["squeue", "-h", "-j", task, "-o", "%L"]
        out = runner.run(cmd, timeout_s=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 1:  # exactly this task's line
        return None
    return parse_time_s(lines[0])
