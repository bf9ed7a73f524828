"""A point's state word: what ``status``, ``report``, ``resubmit``, ``resume`` and ``cancel`` call it.

One owner for the word, below every layer that needs it (submit, reports, cli): the point's
``status.json`` (read back as :class:`~grpokit.run_folder.sweep_reader.Point`) and Slurm's view of its job
(:class:`grpokit.slurm.job_states.SlurmJobState`, only its ``kit_state`` is read) give one of
queued | running | completed | failed | preempted | timeout | cancelled | skipped_no_gpu | pruned |
not submitted | unknown; in a halving sweep, :func:`at_rung` shows a rung's ``completed`` as ``waiting_rung``.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grpokit.run_folder.halving_record import HalvingRecordError, read_halving
from grpokit.run_folder.liveness import Verdict, settle
from grpokit.run_folder.states import FINAL_STATES, STATUS_WORD, ended_word
from grpokit.run_folder.status_record import parse_time
from grpokit.slurm.job_states import LIVE_WORDS

if TYPE_CHECKING:
    from grpokit.run_folder.status_record import PointStatus
    from grpokit.run_folder.sweep_reader import Point
    from grpokit.slurm.job_states import SlurmJobState

log = logging.getLogger(__name__)

#: The states a point is submitted again from, by ``grpokit resubmit`` (its default ``--states``) and
#: by ``resume=true`` (which also submits the points never submitted): the point stopped short of its
#: target and running it again can finish it. ``skipped_no_gpu`` ran every stage but training, on a
#: node without a GPU: submitted again (to a GPU node) it trains. Not taken again: completed, pruned
#: (stopped on purpose), queued and running (Slurm's), unknown (not known to have failed).
RESUBMITTABLE_STATES: tuple[str, ...] = ("failed", "timeout", "cancelled", "preempted", "skipped_no_gpu")


def status_is_this_jobs(point: Point) -> bool:
    """Whether the point's status.json was written by the job the manifest names (a resubmitted point
    whose new job has not started yet still holds the old job's status). True when either side has
    no Slurm id (a local run, a job that has not written one)."""
    recorded = point.status.slurm if point.status is not None else None
    ids = recorded.ids if recorded is not None else set()
    if not point.job_id or not ids:
        return True
    return point.job_id in ids


def _own_final_word(point: Point) -> str | None:
    """The state the job recorded for itself when it is final and this job's, else None."""
    attempts = point.attempts
    state = point.status.state if point.status is not None else None
    if state not in FINAL_STATES or not attempts or attempts[-1].is_open or not status_is_this_jobs(point):
        return None
    return ended_word(state, attempts[-1].ended_by)


def open_attempt_verdict(point: Point, slurm: SlurmJobState | None) -> Verdict | None:
    """:func:`grpokit.run_folder.liveness.settle` for a point whose status.json is this job's; None otherwise."""
    if not status_is_this_jobs(point):
        return None
    return settle(point, slurm)


def open_attempt_end(point: Point, slurm: SlurmJobState | None) -> dt.datetime | None:
    """When the point's open attempt ended, for a point shown final from evidence (the driver's last
    heartbeat, recorded in ``attempt_end.json``): its elapsed time stops there. None when the last
    attempt is closed (its own ``end`` counts) or nothing decided it over."""
    attempts = point.attempts
    if not attempts or not attempts[-1].is_open:
        return None
    verdict = open_attempt_verdict(point, slurm)
    return parse_time(verdict.ended_at) if verdict is not None else None


@dataclass(frozen=True)
class ShownEvidence:
    """What decides a point's shown state (:func:`shown_state`), read by :func:`evidence`.

    recorded: status.json's ``state`` (None: no file). own_final: the final word the job recorded
    for itself, its last attempt closed, this job's (:func:`_own_final_word`; None otherwise).
    ended_by: the last attempt's ``ended_by``. this_jobs: status.json was written by the job the
    manifest names (:func:`status_is_this_jobs`). submitted: the manifest names a Slurm job.
    slurm_word: Slurm's answer as the kit's word (``SlurmJobState.kit_state``; None: no answer, and
    ``unknown`` counts as none). verdict: the state decided from evidence for an open attempt
    (:func:`grpokit.run_folder.liveness.settle`: the driver's record, a recorded end, Slurm's end
    state, a stale heartbeat; None: closed, or nothing proves it over).
    """

    recorded: str | None = None
    own_final: str | None = None
    ended_by: str | None = None
    this_jobs: bool = True
    submitted: bool = False
    slurm_word: str | None = None
    verdict: str | None = None


def shown_state(ev: ShownEvidence) -> str:
    """The point's state word from its evidence, pure (see :func:`point_state` for the rules)."""
    word = ev.slurm_word if ev.slurm_word != "unknown" else None
    if word is not None:
        if word == "running" and ev.own_final is not None:
            return ev.own_final  # outcome written, the job is only cleaning up
        if word in LIVE_WORDS:
            return word
        if ev.own_final is not None:
            return ev.own_final
        if ev.verdict is not None:
            return ev.verdict
        if ev.ended_by in ("timeout", "preempted") and ev.this_jobs:
            return ev.ended_by
        if word == "completed":
            return "unknown"  # Slurm's exit 0, but the job wrote no outcome: nothing says it trained
        return word
    if ev.own_final is not None:
        return ev.own_final
    if ev.verdict is not None:
        return ev.verdict
    if ev.recorded == "requeued" and not ev.submitted and ev.ended_by in ("timeout", "preempted"):
        return ev.ended_by  # a local run stopped with a checkpoint: nothing requeues it but a re-run
    if ev.recorded in STATUS_WORD:
        return STATUS_WORD[ev.recorded]
    return "unknown" if ev.submitted else "not submitted"


def evidence(point: Point, slurm: SlurmJobState | None) -> ShownEvidence:
    """:class:`ShownEvidence` of a point: its status.json, Slurm's answer and, for an open attempt
    Slurm does not hold, the verdict from the run folder's evidence (files read only then)."""
    attempts = point.attempts
    own = _own_final_word(point)
    word = slurm.kit_state if slurm is not None else None
    needs_verdict = own is None and word not in LIVE_WORDS
    verdict = open_attempt_verdict(point, slurm if word != "unknown" else None) if needs_verdict else None
    return ShownEvidence(
        recorded=point.status.state if point.status is not None else None,
        own_final=own,
        ended_by=attempts[-1].ended_by if attempts else None,
        this_jobs=status_is_this_jobs(point),
        submitted=bool(point.job_id),
        slurm_word=word,
        verdict=verdict.state if verdict is not None else None,
    )


def point_state(point: Point, slurm: SlurmJobState | None) -> str:
    """queued | running | completed | failed | preempted | timeout | cancelled | skipped_no_gpu |
    pruned | not submitted | unknown: :func:`shown_state` of the point's :func:`evidence`.

    A live Slurm state (queued/running) wins: status.json lags behind the scheduler; except that a
    job still RUNNING whose own status.json already records a final state with its attempt closed
    is shown by that state (the driver wrote its outcome and is stopping Ray and the sidecars: the
    point is done, the job is only releasing its nodes). Once Slurm says the job ended, the state
    the job recorded for itself (a final ``state`` in status.json, its last attempt closed, written
    by this job) wins over Slurm's word: a job that ran every stage but
    training exits 0 (Slurm's COMPLETED) and is ``skipped_no_gpu``; one that failed its point and
    exited by itself is ``failed``. An attempt stopped by the warning signal that recorded no final
    state is shown by how it ended (``timeout``/``preempted``). Slurm's COMPLETED for a job that
    recorded no outcome at all is ``unknown`` (see :func:`grpokit.reports.summary.point_reason`).
    Without Slurm's answer (job aged out, no accounting, a local run) status.json decides. An
    attempt status.json leaves open once Slurm ended or forgot the job is decided from evidence
    (:func:`open_attempt_verdict`: the driver's heartbeat and record, a recorded end, submitit's
    stderr, Slurm's exit code); once decided final it stays so until a new attempt starts.
    """
    return shown_state(evidence(point, slurm))


#: A point of a successive-halving sweep that completed a rung (not its final target): the
#: controller job ranks the rung's points next, then resubmits it to the next rung or prunes it.
WAITING_RUNG = "waiting_rung"


def halving_final_target(sweep_dir: Path) -> int | None:
    """The last stage's target step of a halving sweep (``<sweep>/halving.json``), else None (also,
    with a logged warning naming the file, when that file is not a halving record)."""
    try:
        record = read_halving(sweep_dir)
    except HalvingRecordError as exc:
        log.warning("%s; the points' rungs are shown as their targets", exc)
        return None
    return record.plan.final_target if record is not None else None


def below_final_target(status: PointStatus | None, final_target: int | None) -> bool:
    """Whether a halving point's ``status.json`` targets a rung below the sweep's final target."""
    target = status.target_step if status is not None else None
    return final_target is not None and target is not None and int(target) < final_target


def at_rung(point: Point, state: str, final_target: int | None) -> str:
    """``waiting_rung`` for a halving point shown ``completed`` at a rung below the sweep's final
    target (``completed`` means the target was reached: here only the rung was); else ``state``."""
    if state == "completed" and below_final_target(point.status, final_target):
        return WAITING_RUNG
    return state


def rung_reason(point: Point, final_target: int | None) -> str:
    """Why a point is ``waiting_rung``, one line."""
    target = point.status.target_step if point.status is not None else None
    return (
        f"trained to the rung at step {target} (of {final_target}); waiting for the halving controller to "
        "rank this rung's points (halving.json), then it continues or ends pruned"
    )
