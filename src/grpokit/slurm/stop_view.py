"""What slurmctld says about this task when a stop signal arrives (``scontrol show job -o``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
import time

from grpokit.slurm import runner
from grpokit.slurm.task import JobEnv

#: Seconds between two asks when scontrol failed (a slurmctld busy with other jobs' requests).
RETRY_PAUSE_S = 0.3
#: Words of scontrol's errors that say slurmctld did not answer this time (asked again); any other
#: error ("Invalid job id specified": Slurm no longer lists the task) is its answer.
TRANSIENT = ("timed out", "unable to contact", "connection refused", "connect failure", "try again", "temporarily")


@dataclasses.dataclass(frozen=True)
class SlurmStopView:
    """What slurmctld says about this task when a stop signal arrives (``scontrol show job -o``).

    ``requeueing``: Slurm is requeueing it (preemption in REQUEUE mode, ``scontrol requeue``):
    slurmctld counts the restart (``Restarts=``) before it sends SIGTERM, so a count above this
    run's ``SLURM_RESTART_COUNT`` means the job comes back; an unchanged one on SIGTERM means it
    ends for good (``scancel``, the time limit).
    ``preempting``: Slurm is preempting it: ``PreemptTime`` is set, at or after this run's
    ``StartTime`` (with ``preempt_send_user_signal`` the job's ``--signal`` comes then, a
    ``GraceTime`` before SIGTERM, whatever time is left before the limit).
    Either is None when scontrol cannot say.
    """

    requeueing: bool | None
    preempting: bool | None


def _slurm_time(value: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(value) if value and value[0].isdigit() else None
    except ValueError:
        return None


def slurm_stop_view(timeout_s: float = 10) -> SlurmStopView:
    """:class:`SlurmStopView` of this task (both None outside Slurm or when scontrol fails)."""
    job = JobEnv.from_env()
    task = job.task_id
    if not task:
        return SlurmStopView(None, None)
    cmd = ["scontrol", "show", "job", "-o", task]
    deadline = time.monotonic() + timeout_s
    while True:  # a busy slurmctld refuses a query now and then: asked again within the time-out
        try:
            out = runner.run(cmd, timeout_s=max(deadline - time.monotonic(), 0.5))
        except (OSError, subprocess.TimeoutExpired):
            return SlurmStopView(None, None)
        if out.returncode == 0:
            break
        said = f"{out.stderr} {out.stdout}".lower()
        if not any(m in said for m in TRANSIENT) or time.monotonic() + RETRY_PAUSE_S >= deadline:
            return SlurmStopView(None, None)
        time.sleep(RETRY_PAUSE_S)
    fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
    restarts = fields.get("Restarts", "")
    requeueing = int(restarts) > job.restart_count if restarts.isdigit() else None
    started, preempt = _slurm_time(fields.get("StartTime")), _slurm_time(fields.get("PreemptTime"))
    if "PreemptTime" not in fields:
        preempting = None
    else:
        preempting = preempt is not None and (started is None or preempt >= started)
    return SlurmStopView(requeueing, preempting)
