"""What a stop signal means for a point: its next state, how the attempt ended, whether to requeue.

A pure function of what the driver knows when the signal arrives, so that every case is
table-tested without Slurm (``tests/unit/test_stop_decision.py``):

=========  ==================================================  ============  ==========  ==============
signal     what the driver knows                               state         ended_by    requeue
=========  ==================================================  ============  ==========  ==============
USR2       Slurm is preempting the task (``PreemptTime``)      requeued      preempted   in Slurm
USR2       own time left <= lead + margin, budget left         requeued      timeout     in Slurm
USR2       own time left <= lead + margin, budget spent        failed        timeout     no
USR2       own time left unknown in Slurm (squeue failed)      as a time-out (bounded)
USR2       own time left > lead + margin (scancel --signal)    requeued      preempted   in Slurm
TERM       Slurm counted a restart (preemption, requeue)       requeued      preempted   no (Slurm does)
TERM       Slurm is preempting it, no restart (CANCEL mode)    requeued      preempted   in Slurm
TERM       no restart counted, time left <= 0                  failed        timeout     no
TERM       no restart counted (scancel)                        cancelled     cancelled   no
TERM       unknown (outside Slurm, scontrol failed)            requeued      preempted   no
INT        (Ctrl-C)                                            cancelled     cancelled   no
=========  ==================================================  ============  ==========  ==============

"Own time left" is this task's (``squeue -j <array id>_<task id>``), never a sibling's; a
preemption is told by Slurm itself (its ``PreemptTime`` for this run), since near the end of a
short allocation a preemption's warning comes with as little time left as the time limit's. Slurm
sends the ``--signal`` warning when the time left is at most ``lead + 30 s`` (its periodic check,
``PERIODIC_TIMEOUT``), so a warning is recognised up to ``lead + TIMEOUT_MARGIN_S``. A time-out
is bounded by ``runtime.max_timeout_requeues``; a preemption is not (the point did nothing wrong).
When Slurm cannot tell the time left, a warning counts as a time-out: a preemption mistaken for a
time-out spends one requeue of a bounded budget, a time-out mistaken for a preemption would requeue
without bound.
"""

from __future__ import annotations

import dataclasses
import signal

#: Slack over the lead within which a USR2 counts as the time-limit warning (s): Slurm's periodic
#: check sends it up to 30 s early, and squeue rounds to seconds.
TIMEOUT_MARGIN_S = 60.0


@dataclasses.dataclass(frozen=True)
class StopDecision:
    """``state``: the point's next ``status.json`` state (``requeued`` | ``failed`` | ``cancelled``).
    ``ended_by``: the attempt's ``ended_by`` (``timeout`` | ``preempted`` | ``cancelled``).
    ``requeue``: the driver runs ``scontrol requeue <own task id>`` after the save.
    ``why``: one line for the driver log."""

    state: str
    ended_by: str
    requeue: bool
    why: str


def decide(
    signum: int,
    *,
    time_left_s: float | None,
    lead_s: float,
    timeouts_so_far: int,
    max_timeout_requeues: int,
    in_slurm: bool,
    slurm_requeues: bool | None = None,
    slurm_preempting: bool | None = None,
) -> StopDecision:
    """Classify a stop signal (see the module table).

    Args:
        signum: the first stop signal the driver received (``signal.SIGUSR2``, ``SIGTERM``, ``SIGINT``).
        time_left_s: this task's own time left when the signal arrived (s), None when unknown.
        lead_s: ``cluster.signal_lead_s``, the ``--signal`` lead (s).
        timeouts_so_far: attempts of this point that already ended by ``timeout`` (since its last
            explicit resubmission).
        max_timeout_requeues: ``runtime.max_timeout_requeues``; a point gets at most this many
            time-out requeues, so at most ``max_timeout_requeues + 1`` attempts end by time-out.
        in_slurm: whether the job runs under Slurm (only then is there anything to requeue).
        slurm_requeues: on SIGTERM, whether Slurm is requeueing the job itself
            (:class:`grpokit.runtime.environment.SlurmStopView`); None when unknown.
        slurm_preempting: whether Slurm is preempting the job (same source); None when unknown.
    """
    if signum == signal.SIGUSR2:
        if not in_slurm:
            return StopDecision("requeued", "preempted", False, "USR2 outside Slurm: checkpoint and stop")
        if slurm_preempting:
            return StopDecision("requeued", "preempted", True, "USR2: Slurm is preempting the job (PreemptTime set)")
        if time_left_s is None or time_left_s <= lead_s + TIMEOUT_MARGIN_S:
            left = "unknown" if time_left_s is None else f"{time_left_s:.0f} s"
            if timeouts_so_far >= max_timeout_requeues:
                return StopDecision(
                    "failed",
                    "timeout",
                    False,
                    f"time-limit warning (own time left {left}); time-out requeues spent "
                    f"({timeouts_so_far} of runtime.max_timeout_requeues={max_timeout_requeues})",
                )
            return StopDecision(
                "requeued",
                "timeout",
                True,
                f"time-limit warning (own time left {left}); time-out requeue {timeouts_so_far + 1} "
                f"of {max_timeout_requeues}",
            )
        return StopDecision(
            "requeued",
            "preempted",
            True,
            f"USR2 with {time_left_s:.0f} s left (> lead {lead_s:.0f} s): preemption or scancel --signal",
        )
    if signum == signal.SIGTERM:
        if slurm_requeues is True:
            return StopDecision("requeued", "preempted", False, "SIGTERM while Slurm requeues the job (preemption)")
        if slurm_preempting:
            return StopDecision("requeued", "preempted", in_slurm, "SIGTERM: Slurm preempts the job without requeue")
        if slurm_requeues is False:
            if time_left_s is not None and time_left_s <= 0:
                return StopDecision("failed", "timeout", False, "SIGTERM at the time limit (no warning handled)")
            return StopDecision("cancelled", "cancelled", False, "SIGTERM and Slurm does not requeue the job (scancel)")
        return StopDecision("requeued", "preempted", False, "SIGTERM (Slurm's intent unknown): resumes when restarted")
    return StopDecision("cancelled", "cancelled", False, f"{signal.Signals(signum).name}: cancelled")
