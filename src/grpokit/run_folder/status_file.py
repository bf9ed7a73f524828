"""The driver's handle on ``status.json`` (:class:`StatusFile`): one attempt open at a time.

The format and its records are :mod:`grpokit.run_folder.status_record` (the one reader
:func:`~grpokit.run_folder.status_record.read_status`); this module only changes the record the way
the in-job driver does, and writes it atomically after each change it saves.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

from grpokit.run_folder.atomic import now
from grpokit.run_folder.attempt_end import AttemptEnd
from grpokit.run_folder.layout import STATUS
from grpokit.run_folder.states import EndedBy, PointState
from grpokit.run_folder.status_record import Attempt, PointStatus, SlurmAllocation, read_status, write_status


class StatusFile:
    """The driver's handle on ``status.json``: ``record`` is the file as it is now (saved or about to be).

    Raises:
        StatusFileError: (at construction) an existing file that :func:`read_status` refuses.
    """

    def __init__(self, run_dir: Path | str):
        self.path = Path(run_dir) / STATUS
        self.record: PointStatus = read_status(run_dir)  # type: ignore[assignment]  # pending when missing

    @property
    def attempt(self) -> int:
        """Number of the current (last) attempt, 1-based; 0 before the first."""
        return len(self.record.attempts)

    @property
    def state(self) -> PointState | str:
        """The recorded state as :class:`PointState` (a word the enum does not know is returned as is)."""
        return self.record.point_state

    def save(self) -> None:
        self.record = self.record.with_fields(updated=now())
        write_status(self.path.parent, self.record)

    def start_attempt(
        self,
        *,
        target_step: int | None,
        slurm: dict[str, Any],
        previous_end: AttemptEnd | tuple[str, str] | None = None,
        rehearsal: bool = False,
    ) -> int:
        """Open a new attempt (closing a previous one that a kill left open) and mark ``running``.

        slurm: the allocation (:func:`grpokit.slurm.task.slurm_info`, ``{}`` outside Slurm).
        previous_end: that open attempt's end, from evidence
        (:func:`grpokit.run_folder.liveness.killed_attempt_end`: its ``ended_by``, reason, Slurm's end
        state and end time) or ``(ended_by, reason)``; None: ``killed``, no reason. The attempt keeps
        Slurm's end state when known (``FAILED``); else ``requeued`` when this start is the same job
        (Slurm requeued it), else none. Its ``end`` is the recorded one (the driver's last beat), else now.
        rehearsal: the point runs the kit's stand-in trainer (``rehearse=true``), recorded as
        ``"rehearsal": true``.
        """
        record = self.record
        last = record.last_attempt
        if last is not None and last.is_open:
            # The previous attempt never closed: its process was killed (SIGKILL after KillWait,
            # node failure). Slurm's requeue count tells that it came back.
            end = previous_end if isinstance(previous_end, AttemptEnd) else None
            ended_by, reason = (end.ended_by, end.reason) if end else previous_end or (EndedBy.KILLED.value, None)
            slurm_state = end.slurm_state if end and end.slurm_state else _restart_state(record.slurm, slurm)
            closed = last.with_fields(end=(end.end if end and end.end else now()), ended_by=ended_by)
            closed = closed.with_fields(slurm_state=slurm_state)
            record = record.with_last_attempt(closed.with_fields(reason=reason) if reason else closed)
        opened = Attempt.opened(len(record.attempts) + 1, now())
        record = dataclasses.replace(record, attempts=(*record.attempts, opened))
        fields: dict[str, Any] = dict(state=PointState.RUNNING.value, reason="", target_step=target_step, slurm=slurm)
        if rehearsal:
            fields["rehearsal"] = True
        self.record = record.with_fields(**fields)
        self.save()
        return len(self.record.attempts)

    def update_attempt(self, **fields: Any) -> None:
        """Set keys of the open attempt (JSON values: ``resume_step=8``, ``nodes=["node1"]``) and save."""
        self.record = self.record.with_last_attempt(self.record.attempts[-1].with_fields(**fields))
        self.save()

    def set_reason(self, reason: str) -> None:
        """The point's ``reason`` (saved with the next change, or by :meth:`save`)."""
        self.record = self.record.with_fields(reason=reason)

    def set_target_step(self, target_step: int) -> None:
        """The point's ``target_step`` (verl's own count, learned at the end; saved with the next change)."""
        self.record = self.record.with_fields(target_step=target_step)

    def set_attempt_reason(self, reason: str) -> None:
        """The open attempt's own ``reason`` (saved with the next change, e.g. :meth:`finish`)."""
        self.record = self.record.with_last_attempt(self.record.attempts[-1].with_fields(reason=reason))

    def set_resubmission(self, token: str) -> None:
        """The resubmission this run took (``resubmit.json``'s token): the point's and the open attempt's
        ``resubmission``; saved."""
        self.record = self.record.with_fields(resubmission=token)
        self.update_attempt(resubmission=token)

    def finish(
        self, state: str, *, ended_by: str, reason: str = "", exit_code: int | None = None, **attempt_fields: Any
    ) -> None:
        """Close the current attempt and set the point's state (words of :class:`PointState` / :class:`EndedBy`).

        attempt_fields: further keys of the attempt (``last_step``, ``timings``, ``slurm_state``);
        a ``last_step`` that is not None is also the point's.
        """
        attempt = self.record.attempts[-1]
        start = dt.datetime.fromisoformat(attempt.start)
        closed = attempt.with_fields(
            end=now(),
            ended_by=str(ended_by),
            exit_code=exit_code,
            elapsed_s=round((dt.datetime.now(dt.UTC) - start).total_seconds(), 1),
            **attempt_fields,
        )
        fields: dict[str, Any] = dict(state=str(state), reason=reason, exit_code=exit_code)
        if attempt_fields.get("last_step") is not None:
            fields["last_step"] = attempt_fields["last_step"]
        self.record = self.record.with_last_attempt(closed).with_fields(**fields)
        self.save()


def _restart_state(old: SlurmAllocation | None, new: dict[str, Any]) -> str | None:
    """An open attempt's Slurm state when nothing recorded Slurm's own: ``requeued`` when the new
    start is the same job (Slurm requeued it) or either run is outside Slurm (as before), else None
    (a resubmission: a new job; the old one's end state is not known here)."""
    old_ids = old.ids if old is not None else set()
    new_ids = SlurmAllocation.from_json(new).ids if new else set()
    if not old_ids or not new_ids or old_ids & new_ids:
        return "requeued"
    return None
