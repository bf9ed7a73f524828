"""``wait=true``: block until every point of *this* submission has reached a final state.

A run folder may already hold a final ``status.json`` from an earlier submission (a resume, a
resubmission): it does not count. A point is final for this submission when its ``status.json``
is final and has more attempts than when it was submitted, or when Slurm has ended its job
(``gone_grace_s`` ago, so the driver's last write is not missed) without the driver recording a
new attempt, e.g. a job cancelled while queued or one that failed before the driver started, or
when this submission's attempt was left open and the evidence decides it
(:func:`grpokit.run_folder.liveness.settle`: the driver's record holds its outcome, or Slurm no
longer knows the job and the heartbeat is stale).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from grpokit.config.point import PointSpec
from grpokit.run_folder import FINAL_STATES, PointStatus, pending_status, read_status_or_none

log = logging.getLogger(__name__)


def attempt_counts(specs: list[PointSpec]) -> list[int]:
    """Attempts each point's status.json holds now (0 without one): taken right before submission."""
    return [len((read_status_or_none(s.run_dir) or pending_status()).attempts) for s in specs]


def _slurm_final(job_ids: list[str | None]) -> dict[str, str]:
    from grpokit.slurm.job_states import job_states

    wanted = [j for j in job_ids if j]
    if not wanted:
        return {}
    return {j: st.state for j, st in job_states(wanted).items() if st.kit_state not in ("queued", "running", "unknown")}


def _settled(spec: PointSpec, job_id: str | None, status: PointStatus) -> str | None:
    """The liveness verdict on the point's open attempt (None: nothing proves it over). Slurm is
    asked only when the driver's record holds an outcome or its heartbeat is stale."""
    from grpokit.run_folder.heartbeat import read_record
    from grpokit.run_folder.liveness import settle
    from grpokit.run_folder.sweep_reader import Point
    from grpokit.slurm.job_states import job_states

    record = read_record(Path(spec.run_dir))
    if record is None or (record.outcome is None and not record.stale):
        return None
    slurm = job_states([job_id]).get(job_id) if job_id else None
    point = Point(index=spec.index, name=spec.name, run_dir=Path(spec.run_dir), job_id=job_id, status=status)
    verdict = settle(point, slurm)
    return verdict.state if verdict is not None else None


def wait_for(
    specs: list[PointSpec],
    job_ids: list[str | None],
    attempts_before: list[int],
    *,
    poll_s: float = 5.0,
    gone_grace_s: float = 60.0,
    slurm_final: Callable[[list[str | None]], dict[str, str]] = _slurm_final,
    settled: Callable[[PointSpec, str | None, PointStatus], str | None] = _settled,
) -> list[str]:
    """Wait for this submission's points; returns each point's final state, in ``specs`` order.

    Args:
        specs: the points submitted. job_ids: their Slurm ids (None: run here, no Slurm).
        attempts_before: :func:`attempt_counts` taken before submission.
        poll_s: seconds between looks. gone_grace_s: how long a job Slurm reports ended may go
            without a new final status.json before it counts as ended with Slurm's state.
        settled: the verdict on an attempt of this submission left open (:func:`_settled`).

    Returns:
        status.json's state, or ``slurm:<STATE>`` for a job that ended without the driver saying so.
    """
    final: dict[int, str] = {}
    gone_since: dict[int, float] = {}
    while True:
        for i, spec in enumerate(specs):
            if i in final:
                continue
            # a refused file (warned once) reads as no attempt yet: the job is then followed in Slurm
            status = read_status_or_none(spec.run_dir) or pending_status()
            attempts = status.attempts
            if status.state in FINAL_STATES and len(attempts) > attempts_before[i]:
                final[i] = str(status.state)
            elif len(attempts) > attempts_before[i] and attempts[-1].is_open:
                word = settled(spec, job_ids[i], status)
                if word is not None and word not in ("queued", "running"):
                    final[i] = word
                    log.warning("%s: attempt %d left open, decided from evidence: %s", spec.name, len(attempts), word)
        open_ids = [job_ids[i] for i in range(len(specs)) if i not in final]
        ended = slurm_final(open_ids) if open_ids else {}
        for i in range(len(specs)):
            if i in final or job_ids[i] not in ended:
                gone_since.pop(i, None)
                continue
            since = gone_since.setdefault(i, time.monotonic())
            if time.monotonic() - since >= gone_grace_s:
                final[i] = f"slurm:{ended[job_ids[i]]}"
                log.warning(
                    "%s: Slurm ended job %s (%s) without a new status.json",
                    specs[i].name,
                    job_ids[i],
                    ended[job_ids[i]],
                )
        if len(final) == len(specs):
            return [final[i] for i in range(len(specs))]
        time.sleep(poll_s)
