"""How an attempt ended: one immutable :class:`Outcome`, decided in one place from what happened.

The driver records what happened in an attempt (:class:`Happened`: the error that ended it, whether
the trainer started and how it exited, its completion judgement, a pruning verdict) and, when a
stop signal came, the stop decision (:mod:`grpokit.runtime.decisions.stop_decision`). :func:`decide` turns
them into the outcome that ``status.json`` records and the driver process exits with. The first
row that matches wins:

=========================================  ===================  =====================================
what happened                              state                ended_by
=========================================  ===================  =====================================
the driver named the failure (JobFailed)   failed / requeued    its kind: invalid, sidecar_failed,
                                                                ray_failed, hung
sidecar / Ray failed to start, stop came   the stop decision    the stop decision
sidecar / Ray failed to start              failed               sidecar_failed / ray_failed
any other error in the driver              failed               failed
stop signal before the trainer started     the stop decision    the stop decision
no CUDA GPU (``runtime.needs_gpu``)        skipped_no_gpu       skipped_no_gpu
trainer exited 0 (completion judged)       completed / failed   completed / early_exit /
                                                                no_final_checkpoint
pruning verdict (``runtime.pruning``)      pruned               pruned
trainer stopped after a stop signal        the stop decision    the stop decision
trainer exited non-zero                    failed               failed
=========================================  ===================  =====================================

A node of the job that failed (``Happened.node_failure``, ``node node2 failed``: Slurm's and srun's
lines, :func:`grpokit.run_folder.liveness.node_failure`) overrides every row but ``completed`` and
``skipped_no_gpu``: ``ended_by: node_failed``, the reason naming the node; ``requeued`` when Slurm
requeues the job itself (the SIGTERM's stop decision says so; no retry of the kit's is spent), else
``failed`` (resubmittable). A Ray cluster that died with its node is this, not ``ray_failed``.

A full run or checkpoint folder (``Happened.disk_full``) overrides every row but ``completed``,
``skipped_no_gpu`` and a requeue whose checkpoint was written: ``failed``, ``ended_by: disk_full``,
``disk full writing <path>``.

A run folder deleted or moved while the attempt ran (``Happened.run_folder_gone``,
:mod:`grpokit.runtime.decisions.folder_gone`) overrides every row: ``cancelled``, ``ended_by:
run_folder_gone``, never requeued nor retried (the user took the point away; nothing is recreated).

A trainer that ends by itself keeps its own outcome even when a stop signal came meanwhile (the
target step reached during the warning's lead is ``completed``, not ``requeued``).
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

from grpokit import procs
from grpokit.runtime.decisions import folder_gone
from grpokit.runtime.decisions.completion import Completion
from grpokit.runtime.decisions.first_error import first_error_in_file
from grpokit.runtime.decisions.start_errors import RayStartError, SidecarError
from grpokit.runtime.decisions.stop_decision import StopDecision


class Exit(enum.Enum):
    """What the driver process's exit status means; :attr:`code` is the status itself.

    ``OK`` (0): the point completed, was skipped on a node without GPU, or was already final.
    ``REQUEUED`` (0): the attempt checkpointed and the task is back in Slurm's queue (or, outside
    Slurm, resumes when the same command runs again). It exits 0 on purpose: the attempt did what
    it had to, and a non-zero status would make Slurm record this run as FAILED (``sacct``, the
    kit's Slurm column) and submitit's task raise ``PointFailed`` for a point that is fine.
    ``FAILED`` (1): the point failed or was cancelled; ``status.json`` says why.
    """

    OK = "ok"
    REQUEUED = "requeued"
    FAILED = "failed"

    @property
    def code(self) -> int:
        """The process exit status (0 or 1)."""
        return 1 if self is Exit.FAILED else 0


class JobFailed(RuntimeError):
    """The attempt failed for a reason the driver can name (``ended_by`` says which kind).

    ``requeue``: the attempt ends ``requeued`` and the job requeues itself (a hung trainer within
    the time-out budget).
    """

    def __init__(self, message: str, ended_by: str = "failed", requeue: bool = False):
        super().__init__(message)
        self.ended_by = ended_by
        self.requeue = requeue


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The end of one attempt, as ``status.json`` records it.

    state: the point's next state (``completed`` | ``failed`` | ``requeued`` | ``cancelled`` |
    ``skipped_no_gpu`` | ``pruned``). ended_by: the attempt's ``ended_by``. reason: one paragraph
    ('' when completed). trainer_exit: the trainer's exit status (``exit_code``; None when it did not
    run). requeue: the driver runs ``scontrol requeue`` on its own task after writing the status.
    target_step: verl's own step count when the point leaves it to verl (None otherwise).
    """

    state: str
    ended_by: str
    reason: str = ""
    trainer_exit: int | None = None
    requeue: bool = False
    target_step: int | None = None

    @property
    def exit(self) -> Exit:
        """The meaning of the driver's exit status (:class:`Exit`)."""
        if self.state == "requeued":
            return Exit.REQUEUED
        return Exit.OK if self.state in ("completed", "skipped_no_gpu") else Exit.FAILED


@dataclasses.dataclass(frozen=True)
class Happened:
    """What the driver saw in one attempt (all optional: an attempt may end at any stage).

    error: the exception that ended the attempt. trainer_started: the trainer process was launched.
    gpu_missing: training was skipped (no CUDA GPU and ``runtime.needs_gpu``). trainer_exit: its
    exit status. completion: the judgement of a trainer that exited 0. pruned: the pruning
    verdict's reason. saved_step: the step the trainer checkpointed on the save request.
    trainer_log, verl_cmd: the attempt's ``trainer.log`` and the run's ``verl_cmd.sh``, for reasons.
    disk_full: ``disk full writing <path>`` when a folder the attempt writes to is full
    (:func:`grpokit.runtime.decisions.disk_full.cause`). node_failure: ``node <name> failed`` when Slurm's or
    srun's lines in the job's stderr or the attempt's Ray logs say a node of the job failed.
    run_folder_gone: the reason (:func:`grpokit.runtime.decisions.folder_gone.reason`) when the run
    folder was deleted or moved while the attempt ran.
    """

    error: BaseException | None = None
    trainer_started: bool = False
    gpu_missing: bool = False
    trainer_exit: int | None = None
    completion: Completion | None = None
    pruned: str | None = None
    saved_step: int | None = None
    trainer_log: Path | None = None
    verl_cmd: Path | None = None
    disk_full: str | None = None
    node_failure: str | None = None
    run_folder_gone: str | None = None


def _stopped(stop: StopDecision, reason: str, trainer_exit: int | None = None) -> Outcome:
    """The outcome of a stop; a cancel's reason starts with the stop decision's line (``SIGTERM and
    Slurm does not requeue the job (scancel); ...``): the point's reason is the cancel, not what it
    held while it ran."""
    if stop.state == "cancelled" and stop.why:
        reason = f"{stop.why}; {reason}"
    return Outcome(stop.state, stop.ended_by, reason, trainer_exit, requeue=stop.requeue)


def decide(happened: Happened, *, signal_name: str | None = None, stop: StopDecision | None = None) -> Outcome:
    """The outcome of an attempt (the module table); an attempt that did not complete while a
    folder it writes to is full ends ``failed``, ``ended_by: disk_full``, its reason starting
    with ``disk full writing <path>`` (not retried: no node can fix a shared file system).

    Args:
        happened: what the driver saw.
        signal_name: the first stop signal's name (``USR2``, ``SIGTERM``, ...) when one came.
        stop: the stop decision for that signal (None when none came).
    """
    outcome = _decide(happened, signal_name=signal_name, stop=stop)
    if happened.run_folder_gone:  # the user took the point away: stopped, nothing retried or requeued
        return Outcome("cancelled", folder_gone.ENDED_BY, happened.run_folder_gone, outcome.trainer_exit)
    if happened.node_failure and outcome.state not in ("completed", "skipped_no_gpu"):
        return _node_failed(happened, outcome, stop)
    saved = outcome.state == "requeued" and happened.saved_step is not None  # its checkpoint was written
    if happened.disk_full and outcome.state not in ("completed", "skipped_no_gpu") and not saved:
        symptom = outcome.reason.splitlines()[0] if outcome.reason else ""
        reason = happened.disk_full + (f"; {symptom}" if symptom and symptom != happened.disk_full else "")
        return Outcome("failed", "disk_full", reason, outcome.trainer_exit)
    return outcome


def _node_failed(happened: Happened, outcome: Outcome, stop: StopDecision | None) -> Outcome:
    """The outcome of an attempt a node failure ended (the module's paragraph)."""
    saved = f"; checkpointed step {happened.saved_step}" if happened.saved_step is not None else ""
    if stop is not None and stop.state == "requeued" and not stop.requeue and stop.ended_by == "preempted":
        # SIGTERM with the restart counted: Slurm requeued the job itself (JobRequeue / --requeue)
        reason = f"{happened.node_failure}; Slurm requeues the job{saved}"
        return Outcome("requeued", "node_failed", reason, outcome.trainer_exit)
    symptom = outcome.reason.splitlines()[0] if outcome.reason else ""
    reason = f"{happened.node_failure}{saved}" + (f"; {symptom}" if symptom else "")
    return Outcome("failed", "node_failed", reason, outcome.trainer_exit)


def _decide(happened: Happened, *, signal_name: str | None, stop: StopDecision | None) -> Outcome:
    h, err = happened, happened.error
    if isinstance(err, JobFailed):
        return Outcome("requeued" if err.requeue else "failed", err.ended_by, str(err), requeue=err.requeue)
    if isinstance(err, SidecarError | RayStartError):
        if stop is not None:
            # Slurm signals every process of the job (scancel, preemption): Ray or a sidecar dying
            # now is the stop, not a start-up failure.
            return _stopped(stop, f"stopped on {signal_name} while Ray and the sidecars were starting")
        return Outcome("failed", "sidecar_failed" if isinstance(err, SidecarError) else "ray_failed", str(err))
    if err is not None:
        return Outcome("failed", "failed", f"{type(err).__name__}: {err}")
    if not h.trainer_started:
        if stop is not None:
            return _stopped(stop, "stopped before the trainer started")
        if h.gpu_missing:
            return Outcome(
                "skipped_no_gpu",
                "skipped_no_gpu",
                "no CUDA GPU on this node: Ray, the sidecars and verl's config check ran; training was "
                f"skipped. The trainer command is in {h.verl_cmd}",
                trainer_exit=0,
            )
        return Outcome("failed", "failed", "the attempt ended before the trainer started (driver error)")
    if h.completion is not None:
        c = h.completion
        return Outcome(c.state, c.ended_by, c.reason, h.trainer_exit, target_step=c.target_step)
    if h.pruned is not None:
        kept = f"checkpointed step {h.saved_step}" if h.saved_step is not None else "no new checkpoint"
        return Outcome("pruned", "pruned", f"pruned: {h.pruned}; {kept}", h.trainer_exit)  # final, not requeued
    if stop is not None:
        if h.saved_step is not None:
            reason = f"checkpointed step {h.saved_step} on {signal_name}"
        else:
            reason = f"stopped on {signal_name} without a new checkpoint (resumes from the last one)"
        return _stopped(stop, reason, h.trainer_exit)
    # The first traceback's error names the cause (a dead rollout engine's own error, not verl's
    # later replay-buffer message); the tail follows it.
    cause = first_error_in_file(h.trainer_log) if h.trainer_log else None
    tail = procs.tail(h.trainer_log) if h.trainer_log else ""
    reason = (
        f"trainer exited with {h.trainer_exit}"
        + (f"; first error in trainer.log: {cause}" if cause else "")
        + f"; last lines of trainer.log:\n{tail}"
    )
    return Outcome("failed", "failed", reason, h.trainer_exit)
