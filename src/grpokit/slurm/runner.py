"""The one runner of the programs the kit asks about the cluster and its GPUs.

Slurm's clients (:data:`COMMANDS`: ``squeue``, ``scontrol``, ``sacct``, ``sbatch``, ``scancel``,
``sinfo``), a one-shot ``srun`` step and ``nvidia-smi`` all run through :func:`run`; no module
outside :mod:`grpokit.slurm` runs them itself (``tests/unit/test_slurm_seam.py`` reads the source).
The modules call it as ``runner.run(...)``, so a test replaces this one attribute to answer as
Slurm would, in process (the test double ``tests/doubles/slurm_runner.py``; submitit's
``MockedSubprocess`` habit). Long-running job steps (``srun --overlap`` for Ray's workers, the
signal relay) are process trees the runtime manages (:mod:`grpokit.procs`); their commands are
built here too (:func:`grpokit.slurm.nodes.srun_step`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

#: The programs that run only through :func:`run` (and, for long-running steps, ``srun_step``).
COMMANDS = ("squeue", "scontrol", "sacct", "sbatch", "scancel", "sinfo", "srun", "nvidia-smi")


def run(
    cmd: Sequence[str], *, timeout_s: float, check: bool = False, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``cmd`` to its end, its output captured as text (``stdout``, ``stderr``).

    Args:
        cmd: the program and its arguments.
        timeout_s: seconds before it is killed (a slurmctld or GPU driver that does not answer).
        check: raise on a non-zero exit status.
        env: its environment (default: this process's).

    Raises:
        OSError: the program is missing. subprocess.TimeoutExpired: no answer within ``timeout_s``.
        subprocess.CalledProcessError: with ``check``, a non-zero exit status.
    """
    return subprocess.run(
        list(cmd),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=check,
        env=None if env is None else dict(env),
    )


def start(cmd: Sequence[str]) -> subprocess.Popen:
    """Start ``cmd`` (a one-shot ``srun`` step run alongside others, e.g. one per node) with its
    output piped as text; the caller collects it with ``communicate(timeout=...)``.

    Raises:
        OSError: the program is missing.
    """
    return subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
