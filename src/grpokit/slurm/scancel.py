"""``scancel`` of jobs the kit submitted: the one caller of Slurm's ``scancel`` (Slurm 22.05).

``scancel`` without ``--signal`` ends a pending job at once and sends a running one SIGTERM (then
SIGKILL after the partition's ``KillWait``); an array task is named ``<array>_<task>``, a whole
array by ``<array>``. Ids Slurm no longer knows are not an error for the jobs that are left.
"""

from __future__ import annotations

import subprocess

from grpokit.slurm import runner

#: Seconds to wait for ``scancel`` to answer (slurmctld under load answers in well under a second).
SCANCEL_TIMEOUT_S = 60


def scancel(job_ids: list[str], *, timeout_s: float = SCANCEL_TIMEOUT_S) -> str | None:
    """``scancel <job_ids...>``; returns ``None`` when it succeeded (or there was nothing to cancel),
    else what went wrong in one line (scancel's own last stderr line, or why it did not run).

    Args:
        job_ids: Slurm job ids (``123``, ``123_4``); empty: nothing is run.
        timeout_s: seconds to wait for scancel.
    """
    ids = [str(j) for j in job_ids if j]
    if not ids:
        return None
    try:
        out = runner.run(["scancel", *ids], timeout_s=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scancel {' '.join(ids)} did not run: {exc}"
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip().splitlines()
        return said[-1] if said else f"scancel exited {out.returncode}"
    return None
