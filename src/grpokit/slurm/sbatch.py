"""The batch script of a Slurm request: one renderer for every place that shows or submits it.

:func:`render` is submitit's own renderer (``submitit.slurm.slurm._make_sbatch_string``, the
function ``SlurmExecutor`` writes each submission file with) applied to the kit's
:func:`~grpokit.slurm.executor.executor_parameters`: the file submitit submits, the ``#SBATCH``
lines of ``dry_run.md`` and the request ``sbatch --test-only`` judges are the same text.
``slurm/train.sbatch`` (a plain batch script) is checked against it by a test
(tests/unit/test_slurm_sbatch.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from grpokit.slurm.cluster import SlurmQueryError, run_slurm
from grpokit.slurm.executor import executor_parameters

#: The submission command submitit writes (``python -u -m submitit.core._submit <folder>``), with
#: placeholders where a preview has no folder yet.
PREVIEW_FOLDER = "<folder>"
PREVIEW_COMMAND = f"python -u -m submitit.core._submit {PREVIEW_FOLDER}"


def render(params: dict[str, Any], *, map_count: int | None, folder: str, command: str) -> str:
    """The whole batch script for ``params`` (:func:`executor_parameters`' keywords).

    Args:
        params: submitit's Slurm keywords (``job_name``, ``time``, ...).
        map_count: tasks of the job array (``--array=0-<n-1>%<parallelism>``); None for one job.
        folder: submitit's folder (its ``--output`` path).
        command: the command the script runs.

    Raises:
        ValueError: a keyword submitit does not know.
    """
    from submitit.slurm.slurm import _make_sbatch_string

    return _make_sbatch_string(command=command, folder=folder, map_count=map_count, **params)


def header(script: str) -> list[str]:
    """The ``#SBATCH`` lines of a batch script, in order."""
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


def options(script: str) -> dict[str, str | bool]:
    """The ``#SBATCH`` options of a batch script: ``{"time": "720", "requeue": True, ...}``
    (the flag without its dashes; a flag with no value is True)."""
    out: dict[str, str | bool] = {}
    for line in header(script):
        words = shlex.split(line[len("#SBATCH") :], comments=True)
        if not words:
            continue
        flag, _, value = words[0].lstrip("-").partition("=")
        out[flag] = value if value else True
    return out


def preview(cluster: Any, *, name: str, num_points: int, folder: str | Path | None = None) -> str:
    """The ``#SBATCH`` lines submitit writes for ``num_points`` tasks (``dry_run.md``, ``sbatch
    --test-only``) into ``folder`` (its submitit folder; ``<folder>`` when None). One point is one
    job, not an array (submitit submits a ``map_array`` of one as a plain job)."""
    params = executor_parameters(cluster, name=name, num_points=num_points)
    where = str(folder) if folder is not None else PREVIEW_FOLDER
    script = render(params, map_count=map_count(num_points), folder=where, command=PREVIEW_COMMAND)
    return "\n".join(header(script))


def map_count(num_points: int) -> int | None:
    """submitit's ``map_count`` for ``num_points`` tasks: None (one plain job) for one."""
    return num_points if num_points > 1 else None


def test_only_refusal(script: Path | str) -> str | None:
    """``sbatch --test-only <script>``: Slurm's refusal in its own words (the last line of its
    error), or None when Slurm would run the script (it is not submitted)."""
    try:
        run_slurm(["sbatch", "--test-only", str(script)])
    except SlurmQueryError as exc:
        return str(exc).split("failed: ", 1)[-1]
    return None


def available() -> bool:
    """Whether ``sbatch`` is on this machine's ``PATH`` (a login node, a job of the cluster)."""
    return shutil.which("sbatch") is not None


#: The prefixes of the input environment variables sbatch reads as options (sbatch(1) "INPUT
#: ENVIRONMENT VARIABLES": ``SBATCH_*``, and ``SLURM_*`` such as ``SLURM_MEM_PER_CPU``).
INPUT_VARIABLE_PREFIXES = ("SLURM_", "SBATCH_")
#: Kept: the path of slurm.conf, which every client needs to find the cluster (slurm.conf(5)).
KEPT_VARIABLES = ("SLURM_CONF",)


def job_input_variables(names) -> list[str]:
    """Of the environment variable ``names``, those sbatch would read as options of a job submitted
    from inside another job (the enclosing job's ``SLURM_*``/``SBATCH_*``; ``SLURM_CONF`` is kept)."""
    return [n for n in names if n.startswith(INPUT_VARIABLE_PREFIXES) and n not in KEPT_VARIABLES]


def drop_job_variables(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove :func:`job_input_variables` from ``environ`` (default: this process's, which submitit's
    sbatch inherits) before a job submits another: inside a job sbatch would read the enclosing
    job's variables as options (e.g. ``SLURM_MEM_PER_CPU`` conflicts with ``--mem``). Returns the
    names removed."""
    env = os.environ if environ is None else environ
    names = job_input_variables(list(env))
    for name in names:
        del env[name]
    return names
