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

A hung trainer (:func:`decide_hang`) spends the same budget; :func:`count_timeouts` counts it from
``status.json``. :class:`StopRequest` is the signal as it arrived, with the save deadline
(:func:`save_budget_s`) on the driver's clock, which tests replace by a fake one.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpokit.run_folder.status_record import Attempt

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
        lead_s: ``cluster.signal_delay_s``, the ``--signal`` lead (s).
        timeouts_so_far: attempts of this point that already ended by ``timeout`` (since its last
            explicit resubmission).
        max_timeout_requeues: ``runtime.max_timeout_requeues``; a point gets at most this many
            time-out requeues, so at most ``max_timeout_requeues + 1`` attempts end by time-out.
        in_slurm: whether the job runs under Slurm (only then is there anything to requeue).
        slurm_requeues: on SIGTERM, whether Slurm is requeueing the job itself
            (:class:`grpokit.slurm.stop_view.SlurmStopView`); None when unknown.
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
            if slurm_preempting:
                return StopDecision("requeued", "preempted", False, "SIGTERM: Slurm preempts and requeues the job")
            return StopDecision(
                "requeued",
                "preempted",
                False,
                "SIGTERM: Slurm requeues the job without preempting it (scontrol requeue by an administrator)",
            )
        if slurm_preempting:
            return StopDecision("requeued", "preempted", in_slurm, "SIGTERM: Slurm preempts the job without requeue")
        if slurm_requeues is False:
            if time_left_s is not None and time_left_s <= 0:
                return StopDecision("failed", "timeout", False, "SIGTERM at the time limit (no warning handled)")
            return StopDecision("cancelled", "cancelled", False, "SIGTERM and Slurm does not requeue the job (scancel)")
        return StopDecision("requeued", "preempted", False, "SIGTERM (Slurm's intent unknown): resumes when restarted")
    return StopDecision("cancelled", "cancelled", False, f"{signal.Signals(signum).name}: cancelled")


def decide_hang(*, timeouts_so_far: int, max_timeout_requeues: int, in_slurm: bool) -> StopDecision:
    """A trainer the watchdog found hung and stopped: requeued within the time-out budget (hangs share
    ``runtime.max_timeout_requeues`` with time-outs: both burn a whole allocation), else failed.

    Outside Slurm nothing requeues the point: it fails and the same command resumes it.
    """
    if not in_slurm:
        return StopDecision("failed", "hung", False, "run the same command again to resume")
    if timeouts_so_far >= max_timeout_requeues:
        return StopDecision(
            "failed", "hung", False, f"not requeued (runtime.max_timeout_requeues={max_timeout_requeues} spent)"
        )
    return StopDecision(
        "requeued",
        "hung",
        True,
        f"requeued ({timeouts_so_far + 1} of runtime.max_timeout_requeues={max_timeout_requeues} "
        "time-out/hang requeues)",
    )


def count_timeouts(attempts: Sequence[Attempt], since: str | None) -> int:
    """``timeouts_so_far`` of :func:`decide` / :func:`decide_hang`: the earlier attempts (every one
    but the last, the running one) that ended by ``timeout`` or ``hung`` since the point's last
    explicit resubmission ``since`` (``status.json``'s ``resubmission`` token, None before any)."""
    return sum(1 for a in attempts[:-1] if a.ended_by in ("timeout", "hung") and a.resubmission == since)


#: The shortest save budget (s): a request must leave the trainer time to reach a step boundary.
MIN_SAVE_BUDGET_S = 5.0
#: Slurm's default KillWait (slurm.conf(5)), for a job whose cluster's is not known (s).
DEFAULT_KILL_WAIT_S = 30.0
#: Seconds of KillWait kept for the driver's own close (heartbeat, status.json) and slurmstepd's timing.
KILL_WAIT_MARGIN_S = 3.0
#: Grace periods the driver's close may wait through, one after another, after a SIGTERM: the trainer,
#: the sidecars (one each, two planned), Ray's workers and its head, leftover processes. Most are
#: short: Slurm's SIGTERM reached every process of the job at once.
STOPS_AFTER_SIGTERM = 6


@dataclasses.dataclass(frozen=True)
class TermGrace:
    """The driver's use of the time between Slurm's SIGTERM and its SIGKILL (s).

    total_s: KillWait less :data:`KILL_WAIT_MARGIN_S` (None outside Slurm: nothing kills the driver).
    save_s: the trainer's save budget after the request. stop_s: each process stop's grace (SIGTERM
    to SIGKILL); ``save_s + STOPS_AFTER_SIGTERM x stop_s == total_s``.
    """

    total_s: float | None
    save_s: float
    stop_s: float


def sigterm_grace(
    kill_wait_s: float | None, *, kill_grace_s: float, in_slurm: bool, margin_s: float = KILL_WAIT_MARGIN_S
) -> TermGrace:
    """How the driver spends the time after a SIGTERM (or SIGINT) so that it closes its attempt
    before Slurm's SIGKILL.

    kill_wait_s: Slurm's KillWait (``scontrol show config``; None: unknown, Slurm's default
    :data:`DEFAULT_KILL_WAIT_S` is assumed). kill_grace_s: ``runtime.kill_grace_s``. Under Slurm,
    ``KillWait - margin_s`` (at least 1 s) is split: each of the :data:`STOPS_AFTER_SIGTERM` grace
    periods gets ``min(kill_grace_s, total / 12)`` and the trainer's save the rest, at least half
    (KillWait 10 s: 7 s, each stop 0.58 s, the save 3.5 s). Outside Slurm nothing kills the driver after a SIGTERM: the
    save gets ``2 x kill_grace_s`` and each stop ``kill_grace_s``.
    """
    if not in_slurm:
        return TermGrace(None, 2 * kill_grace_s, kill_grace_s)
    total = max(1.0, (kill_wait_s if kill_wait_s else DEFAULT_KILL_WAIT_S) - margin_s)
    stop = min(kill_grace_s, total / (2 * STOPS_AFTER_SIGTERM))
    return TermGrace(total, total - STOPS_AFTER_SIGTERM * stop, stop)


def save_budget_s(
    signum: int,
    *,
    time_left_s: float | None,
    save_deadline_s: float,
    grace_s: float,
    term: TermGrace | None = None,
) -> float:
    """Seconds the trainer gets, after the save request, to checkpoint and stop before the driver
    stops it.

    USR2 comes ``signal_delay_s`` before the end: ``runtime.save_deadline_s``. SIGTERM (and SIGINT)
    come only Slurm's KillWait before SIGKILL: ``term.save_s`` (:func:`sigterm_grace`; without it
    ``2 x runtime.kill_grace_s``). Either way the budget ends ``grace_s`` before this task's own end
    (``time_left_s``, when known), so the driver's teardown still fits, and is never below
    :data:`MIN_SAVE_BUDGET_S` on that account.
    """
    term_s = term.save_s if term is not None else 2 * grace_s
    budget = save_deadline_s if signum == signal.SIGUSR2 else min(save_deadline_s, term_s)
    if time_left_s is not None:
        budget = min(budget, max(time_left_s - grace_s, MIN_SAVE_BUDGET_S))
    return budget


@dataclasses.dataclass(frozen=True)
class StopRequest:
    """The first stop signal as the driver saw it on arrival: :func:`decide`'s inputs from Slurm and
    the save deadline.

    term: how the time after a SIGTERM is spent (:func:`sigterm_grace`), None when not decided.
    signum: the signal. at: the driver's clock when it arrived (s; ``time.monotonic`` in a job, a
    fake clock in tests). save_budget_s: :func:`save_budget_s`. time_left_s: this task's own time
    left then (s, None when unknown). slurm_requeues, slurm_preempting: what ``scontrol`` said then
    (:class:`grpokit.slurm.stop_view.SlurmStopView`, None when unknown).
    """

    signum: int
    at: float
    save_budget_s: float
    time_left_s: float | None = None
    slurm_requeues: bool | None = None
    slurm_preempting: bool | None = None
    term: TermGrace | None = None

    @property
    def stop_grace_s(self) -> float | None:
        """Each process stop's grace after this signal (s): :attr:`TermGrace.stop_s` for SIGTERM and
        SIGINT, None for USR2 (``runtime.kill_grace_s`` stands)."""
        return self.term.stop_s if self.term is not None and self.signum != signal.SIGUSR2 else None

    @property
    def kill_at(self) -> float | None:
        """The clock reading by which the driver must have closed (Slurm's SIGKILL less the margin),
        None for USR2 or outside Slurm."""
        if self.term is None or self.term.total_s is None or self.signum == signal.SIGUSR2:
            return None
        return self.at + self.term.total_s

    @property
    def name(self) -> str:
        """``USR2``, ``SIGTERM``, ... (Python's name of the signal)."""
        return signal.Signals(self.signum).name

    @property
    def deadline(self) -> float:
        """The clock reading after which the driver stops a trainer that has not stopped itself."""
        return self.at + self.save_budget_s

    def overdue(self, now: float) -> bool:
        """Whether ``now`` (the same clock as :attr:`at`) is past :attr:`deadline`."""
        return now > self.deadline

    def decide(self, *, lead_s: float, timeouts_so_far: int, max_timeout_requeues: int, in_slurm: bool) -> StopDecision:
        """:func:`decide` for this request."""
        return decide(
            self.signum,
            time_left_s=self.time_left_s,
            lead_s=lead_s,
            timeouts_so_far=timeouts_so_far,
            max_timeout_requeues=max_timeout_requeues,
            in_slurm=in_slurm,
            slurm_requeues=self.slurm_requeues,
            slurm_preempting=self.slurm_preempting,
        )
