"""TEST DOUBLE of :mod:`grpokit.slurm.runner`: Slurm's clients answered in this process, from a job table.

submitit's ``MockedSubprocess`` habit: the one runner (``grpokit.slurm.runner.run``) is replaced, so
every module of :mod:`grpokit.slurm` (time left, stop view, requeue, scancel, ...) runs its real code
and parses answers in Slurm's own formats, and the decisions built on them (stop, requeue, cancel,
retry) are unit-tested in seconds without slurmctld. What only a real cluster shows (signal timing,
the requeue itself) stays in ``tests/integration``.

It answers, for the tasks in :attr:`FakeSlurm.tasks` (``<array id>_<task id>``):

- ``squeue -h -j <task> -o %L``: the task's time left (``H:MM:SS``; ``UNLIMITED`` when None);
- ``scontrol show job -o <task>``: ``JobId``, ``JobState``, ``Restarts``, ``StartTime``, ``PreemptTime``;
- ``scontrol requeue <task>``: the task is requeued (``Restarts`` + 1, ``PENDING``);
- ``scontrol update JobId=<task> <Field=value>...``: recorded in the task's ``updates``;
- ``scancel <task>...``: the tasks are ``CANCELLED``.

An unknown task gets Slurm's own refusal (exit 1, ``Invalid job id specified``); a program named in
:attr:`FakeSlurm.hanging` does not answer (``subprocess.TimeoutExpired``, as from a slurmctld that
does not respond). Every command line is recorded in :attr:`FakeSlurm.calls`.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Mapping, Sequence

from grpokit.slurm import runner

#: The variables of array task 77_1 in its first run (what :class:`grpokit.slurm.task.JobEnv` reads).
TASK_ENV = {
    "SLURM_JOB_ID": "78",
    "SLURM_ARRAY_JOB_ID": "77",
    "SLURM_ARRAY_TASK_ID": "1",
    "SLURM_RESTART_COUNT": "0",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURMD_NODENAME": "node1",
}
START_TIME = "2026-12-03T12:00:00"


@dataclasses.dataclass
class FakeTask:
    """One task as slurmctld knows it. time_left_s: None is ``UNLIMITED``. preempt_time: Slurm's
    ``PreemptTime`` (``None`` when not preempted)."""

    time_left_s: float | None = 3600
    state: str = "RUNNING"
    restarts: int = 0
    start_time: str = START_TIME
    preempt_time: str | None = None
    updates: list[str] = dataclasses.field(default_factory=list)


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return "UNLIMITED"
    s = max(int(seconds), 0)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class FakeSlurm:
    """``runner.run`` for the tasks in ``tasks`` (see the module docstring)."""

    def __init__(self, tasks: Mapping[str, FakeTask] | None = None, *, hanging: Sequence[str] = ()):
        self.tasks: dict[str, FakeTask] = dict(tasks or {})
        self.hanging = set(hanging)
        self.calls: list[list[str]] = []

    def install(self, monkeypatch, env: Mapping[str, str] | None = TASK_ENV) -> FakeSlurm:
        """Answer for ``grpokit.slurm.runner.run`` and, with ``env``, run as that task (its variables set)."""
        monkeypatch.setattr(runner, "run", self.run)
        if env is not None:
            for key, value in env.items():
                monkeypatch.setenv(key, value)
        return self

    def run(
        self, cmd: Sequence[str], *, timeout_s: float, check: bool = False, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        cmd = list(cmd)
        self.calls.append(cmd)
        if cmd[0] in self.hanging:
            raise subprocess.TimeoutExpired(cmd, timeout_s)
        rc, out, err = self._answer(cmd)
        if check and rc != 0:
            raise subprocess.CalledProcessError(rc, cmd, out, err)
        return subprocess.CompletedProcess(cmd, rc, stdout=out, stderr=err)

    def commands(self, program: str) -> list[list[str]]:
        """The recorded command lines of ``program``."""
        return [c for c in self.calls if c[0] == program]

    # -- Slurm's answers -----------------------------------------------------------------------------
    def _task(self, task_id: str) -> FakeTask | None:
        return self.tasks.get(task_id)

    def _answer(self, cmd: list[str]) -> tuple[int, str, str]:
        invalid = (1, "", "slurm_load_jobs error: Invalid job id specified\n")
        match cmd:
            case ["squeue", "-h", "-j", task_id, "-o", "%L"]:
                task = self._task(task_id)
                return (0, f"{_hms(task.time_left_s)}\n", "") if task else invalid
            case ["scontrol", "show", "job", "-o", task_id]:
                task = self._task(task_id)
                if task is None:
                    return invalid
                array_id, _, index = task_id.partition("_")
                return (
                    0,
                    f"JobId=78 ArrayJobId={array_id} ArrayTaskId={index} JobState={task.state} "
                    f"Restarts={task.restarts} StartTime={task.start_time} "
                    f"PreemptTime={task.preempt_time or 'None'}\n",
                    "",
                )
            case ["scontrol", "requeue", task_id]:
                task = self._task(task_id)
                if task is None:
                    return 1, "", f"Requeue of JobId={task_id} returned an error: Invalid job id specified\n"
                task.state, task.restarts = "PENDING", task.restarts + 1
                return 0, "", ""
            case ["scontrol", "update", job_field, *fields] if job_field.startswith("JobId="):
                task = self._task(job_field.removeprefix("JobId="))
                if task is None:
                    return invalid
                task.updates.extend(fields)
                return 0, "", ""
            case ["scancel", *ids]:
                unknown = [i for i in ids if i not in self.tasks]
                for i in ids:
                    if i in self.tasks:
                        self.tasks[i].state = "CANCELLED"
                if unknown:
                    return 1, "", f"scancel: error: Kill job error on job id {unknown[0]}: Invalid job id specified\n"
                return 0, "", ""
        return 1, "", f"{cmd[0]}: the fake answers no such command: {' '.join(cmd)}\n"
