"""Slurm's own lines in a job's output and in ``sbatch``'s stderr, read into plain records.

The formats are Slurm 22.05's (this cluster's ``slurm-wlm 22.05.8``; the captured examples are
``tests/data/slurm_22.05/``, read by ``tests/unit/test_slurm_log_lines.py``):

- slurmstepd, when it ends a job or a step (Slurm's ``src/slurmd/``)::

      slurmstepd-node1: error: *** JOB 1606 ON node1 CANCELLED AT 2026-12-05T02:24:26 ***
      slurmstepd: error: *** STEP 51.0 ON node1 CANCELLED AT 2026-12-03T10:00:00 DUE TO TIME LIMIT ***
      slurmstepd: error: *** JOB 51 ON node1 CANCELLED AT ... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***

  (``DUE TO PREEMPTION``, ``DUE TO JOB REQUEUE``; an ``scancel`` by another user adds ``BY <uid>``).
- srun, on a task of its step or a node of it (Slurm's ``src/srun/``)::

      srun: error: node1: task 0: Killed
      srun: error: node1: task 0: Exited with exit code 3
      srun: error: Node failure on node2

- slurmstepd's OOM note (``task/cgroup``): ``Detected 1 oom-kill event(s) in StepId=51.batch``.
- sbatch, refusing a job (Slurm's ``src/sbatch/``)::

      sbatch: error: Memory specification can not be satisfied
      sbatch: error: Batch job submission failed: Requested node configuration is not available
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The words srun (and bash, for the batch script's children) print for a task ended by a signal
#: (``strsignal(3)``), with the signal's number.
SIGNALS = {"Killed": 9, "Terminated": 15, "Segmentation fault": 11, "Aborted": 6, "Bus error": 7, "Hangup": 1}

_END = re.compile(r"\*\*\* (?:JOB|STEP) (\S+) ON (\S+) CANCELLED AT (\S+)(.*?)\*\*\*")
_BY = re.compile(r"BY (\S+)")
_NODE_FAIL = re.compile(r"Node failure on (\S+)")
_TASK_SIGNAL = re.compile(r"srun: error: (\S+): tasks? [\d,-]+: (" + "|".join(SIGNALS) + r")\b")
_TASK_EXIT = re.compile(r"srun: error: (\S+): tasks? [\d,-]+: Exited with exit code (\d+)")
_OOM = re.compile(r"oom[-_]kill event|Out Of Memory|OUT_OF_MEMORY", re.IGNORECASE)
_SBATCH_ERROR = re.compile(r"sbatch: error: (.*)")


@dataclass(frozen=True)
class JobEnd:
    """slurmstepd's ``*** JOB <job> ON <host> CANCELLED AT <at> [DUE TO <why>] [BY <uid>] ***``.

    job: the job (or step) id as printed. host: the node that printed it (for a node failure, one
    that survived). at: Slurm's local time, ``YYYY-MM-DDTHH:MM:SS``. why: ``preemption`` |
    ``time_limit`` | ``requeue`` | ``node_failure`` | ``cancel`` (a plain ``scancel``). by: the
    user id of an ``scancel`` by someone else, else None.
    """

    job: str
    host: str
    at: str
    why: str
    by: str | None = None


def _why(tail: str) -> str:
    if "NODE FAILURE" in tail:
        return "node_failure"
    if "PREEMPTION" in tail:
        return "preemption"
    if "TIME LIMIT" in tail:
        return "time_limit"
    if "REQUEUE" in tail:
        return "requeue"
    return "cancel"


def job_ends(text: str) -> list[JobEnd]:
    """Every slurmstepd ``CANCELLED AT`` line in ``text``, in order; [] when none."""
    out = []
    for job, host, at, tail in _END.findall(text):
        by = _BY.search(tail)
        out.append(JobEnd(job, host, at, _why(tail), by.group(1) if by else None))
    return out


def failed_nodes(text: str) -> list[str]:
    """The nodes of srun's ``Node failure on <node>`` lines, in order; [] when none."""
    return _NODE_FAIL.findall(text)


def task_signals(text: str) -> list[tuple[str, int]]:
    """``(node, signal number)`` of each srun ``<node>: task <n>: <signal words>`` line; [] when none."""
    return [(m.group(1), SIGNALS[m.group(2)]) for m in _TASK_SIGNAL.finditer(text)]


def task_exits(text: str) -> list[tuple[str, int]]:
    """``(node, exit code)`` of each srun ``<node>: task <n>: Exited with exit code <rc>`` line; [] when none."""
    return [(m.group(1), int(m.group(2))) for m in _TASK_EXIT.finditer(text)]


def oom_killed(text: str) -> bool:
    """Whether ``text`` holds Slurm's OOM note (``oom-kill event``) or its ``OUT_OF_MEMORY`` state."""
    return _OOM.search(text) is not None


def sbatch_errors(text: str) -> list[str]:
    """The messages of sbatch's ``sbatch: error: <message>`` lines, in order; [] when none."""
    return [m.strip() for m in _SBATCH_ERROR.findall(text)]
