"""Slurm's ``KillWait``: the seconds between a job's SIGTERM and its SIGKILL (``scontrol show config``).

On ``scancel``, a preemption without a user signal or the time limit itself, slurmstepd sends
SIGTERM to every process of the job and SIGKILL ``KillWait`` seconds later (slurm.conf(5); the
default is 30 s). The in-job driver fits its stop into it
(:func:`grpokit.runtime.decisions.stop_decision.sigterm_grace`). No ``SLURM_*`` variable of a job
carries it, so it is asked of slurmctld, once per process.
"""

from __future__ import annotations

import logging
import re
import subprocess

from grpokit.slurm import runner

log = logging.getLogger(__name__)

_KILL_WAIT = re.compile(r"^\s*KillWait\s*=\s*(\d+)\s*sec", re.MULTILINE)
_asked: list[float | None] = []  # the one answer of this process (empty: not asked yet)


def parse_kill_wait(config: str) -> float | None:
    """``KillWait = 10 sec`` in ``scontrol show config``'s output -> 10.0; None when absent."""
    m = _KILL_WAIT.search(config)
    return float(m.group(1)) if m else None


def kill_wait_s(timeout_s: float = 5.0) -> float | None:
    """This cluster's KillWait in seconds, asked of ``scontrol show config`` once per process (the
    answer, or its absence, is kept); None when scontrol is missing, fails or does not answer within
    ``timeout_s``."""
    if _asked:
        return _asked[0]
    try:
        res = runner.run(["scontrol", "show", "config"], timeout_s=timeout_s)
        value = parse_kill_wait(res.stdout) if res.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("could not ask Slurm's KillWait (scontrol show config: %s); counted as unknown", exc)
        value = None
    _asked.append(value)
    return value
