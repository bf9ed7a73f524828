"""``scontrol requeue`` of this task: it goes back to the queue with the same id (and run folder)."""

from __future__ import annotations

import logging
import signal
import subprocess

from grpokit.slurm import runner
from grpokit.slurm.task import slurm_task_id

log = logging.getLogger(__name__)


def requeue_self() -> bool:
    """``scontrol requeue <own task id>``: this task (never its array) goes back to the queue.

    Slurm signals the job (SIGTERM) while requeueing it, so this process ignores SIGTERM and USR2
    from here on (it is done: the caller has written its state). Returns whether scontrol
    accepted; a refusal is logged with scontrol's own words (False outside Slurm).
    """
    job = slurm_task_id()
    if not job:
        log.error("not in a Slurm job: nothing to requeue")
        return False
    log.info("requeueing job %s", job)
    for handler_sig in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(handler_sig, signal.SIG_IGN)  # Slurm signals the job while requeueing it
    try:
        out = runner.run(["scontrol", "requeue", job], timeout_s=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error("scontrol requeue %s failed: %s", job, exc)
        return False
    if out.returncode != 0:
        log.error("scontrol requeue %s failed: %s", job, out.stderr.strip())
        return False
    return True


def delay_and_exclude(task_id: str, *, start_in_s: int, exclude: list[str] | tuple[str, ...] = ()) -> bool:
    """After a requeue of ``task_id``: ``scontrol update JobId=<task> StartTime=now+<start_in_s>
    [ExcNodeList=<nodes>]`` (it starts no sooner, and not on ``exclude``).

    Returns whether scontrol accepted; a refusal is logged with its own words (the requeued task
    then runs at once, anywhere).
    """
    fields = [f"StartTime=now+{max(int(start_in_s), 0)}"]
    if exclude:
        fields.append(f"ExcNodeList={','.join(exclude)}")
    cmd = ["scontrol", "update", f"JobId={task_id}", *fields]
    try:
        out = runner.run(cmd, timeout_s=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error("%s failed: %s", " ".join(cmd), exc)
        return False
    if out.returncode != 0:
        log.error("%s failed: %s", " ".join(cmd), (out.stderr or out.stdout).strip())
        return False
    log.info("requeued %s: %s", task_id, " ".join(fields))
    return True
