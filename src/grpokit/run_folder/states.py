"""The words ``status.json`` uses: a point's ``state`` and an attempt's ``ended_by`` (docs/run-folder.md),
and the one mapping of a recorded ``state`` to the word ``status`` shows (:data:`STATUS_WORD`,
:func:`ended_word`; the shown state itself is decided by :mod:`grpokit.run_folder.point_state`).

Both are ``StrEnum``: a member equals its string (``PointState.COMPLETED == "completed"``), so the
JSON files hold plain words and a word read back compares with the enum directly.
"""

from __future__ import annotations

from enum import StrEnum


class PointState(StrEnum):
    """``status.json`` ``state``: written by the in-job driver only."""

    PENDING = "pending"  # no job has started (also what a missing status.json means)
    RUNNING = "running"
    REQUEUED = "requeued"  # an attempt ended and Slurm (or the kit) starts the point again
    COMPLETED = "completed"  # trained to its target step, with the final checkpoint when saving
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED_NO_GPU = "skipped_no_gpu"  # every stage but training ran: the node had no GPU
    PRUNED = "pruned"  # stopped on a failure sign in its metrics (runtime.pruning) or by successive halving

    @property
    def is_final(self) -> bool:
        """Whether nothing restarts the point but ``resubmit`` (its ``resubmit.json``)."""
        return self in FINAL_STATES


#: States after which a job of the point exits at once unless ``resubmit.json`` asks it to run.
FINAL_STATES: frozenset[PointState] = frozenset(
    {PointState.COMPLETED, PointState.FAILED, PointState.CANCELLED, PointState.SKIPPED_NO_GPU, PointState.PRUNED}
)
#: Final states of a point that did what it was asked (the driver's exit status 0).
SUCCESS_STATES: frozenset[PointState] = frozenset({PointState.COMPLETED, PointState.SKIPPED_NO_GPU})


class EndedBy(StrEnum):
    """An attempt's ``ended_by`` in ``status.json``: how that start of the job ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"
    SIDECAR_FAILED = "sidecar_failed"
    SKIPPED_NO_GPU = "skipped_no_gpu"
    EARLY_EXIT = "early_exit"
    NO_FINAL_CHECKPOINT = "no_final_checkpoint"
    INVALID = "invalid"
    HUNG = "hung"
    PRUNED = "pruned"  # a runtime.pruning rule fired (grpokit.runtime.processes.pruning)
    DISK_FULL = "disk_full"  # a full (or over-quota) run or checkpoint folder: no other node can fix it
    NODE_FAILED = "node_failed"  # a node of the job failed (Slurm's NODE FAILURE, srun's "Node failure on X")
    RUN_FOLDER_GONE = "run_folder_gone"  # the run folder was deleted or moved while it ran (never written there)
    KILLED = "killed"  # the attempt never closed: found open by the next start (SIGKILL, node failure)


#: status.json ``state`` -> the status word shown when Slurm has no answer (or the job's own record wins).
STATUS_WORD: dict[str, str] = {
    "pending": "queued",
    "requeued": "queued",
    "running": "running",
    "completed": "completed",
    "cancelled": "cancelled",
    "skipped_no_gpu": "skipped_no_gpu",
    "pruned": "pruned",
    "failed": "failed",
    "timeout": "timeout",
    "preempted": "preempted",
    "sidecar_failed": "failed",
}
#: The ``ended_by`` words that name how a ``failed`` or ``requeued`` attempt ended (shown by them).
ENDED_BY_WORDS: tuple[str, ...] = ("timeout", "preempted", "cancelled")


def ended_word(state: str | None, ended_by: str | None) -> str:
    """The word shown for an attempt that ended with ``state`` and ``ended_by`` and that nothing
    will start again (the job's own final record, or the driver's recorded outcome once Slurm no
    longer holds the job).

    ``failed``/``requeued`` ended by ``timeout``/``preempted``/``cancelled`` -> that word; a
    ``requeued``, ``pending`` or ``running`` left so -> ``failed`` (nothing restarts it); else
    :data:`STATUS_WORD`'s word (``sidecar_failed`` -> ``failed``), the state itself when unlisted.
    """
    if state in ("failed", "requeued") and ended_by in ENDED_BY_WORDS:
        return str(ended_by)
    if state in ("requeued", "pending", "running"):
        return "failed"
    return STATUS_WORD.get(str(state), str(state))
