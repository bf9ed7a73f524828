"""``<run>/attempt_end.json``: an open attempt's end as a reader first decided it (issue 36).

When the driver could not close its attempt (SIGKILL, a node failure), ``status``, ``resubmit``
and ``wait=true`` decide the attempt from evidence (:mod:`grpokit.run_folder.liveness`). The first
final verdict is written here, so that a later read does not lose it when the evidence goes away
(Slurm forgets the job after MinJobAge; the heartbeat only turns stale 6 beats later): the point
stays final with the same reason until a new attempt of it starts. The next start of the job closes
the open attempt with it (its Slurm state and end time, not the restart's).

Format (JSON object): ``attempt`` (the attempt's number, 1-based), ``job_id`` (Slurm's display id
or null), ``state`` (a point state word: failed, cancelled, timeout, preempted), ``reason`` (one
line), ``slurm_state`` (Slurm's end state, e.g. ``FAILED``, or null when Slurm no longer knew the
job), ``end`` (UTC ISO time: the driver's last heartbeat, else when it was decided), ``decided``
(UTC ISO time). Written atomically; a reader that cannot write (permissions, a full disk) goes on
without it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from grpokit.run_folder.atomic import now, write_json_atomic
from grpokit.run_folder.layout import ATTEMPT_END

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptEnd:
    """The end of an attempt its driver did not close (see the module's format); ``ended_by`` is the
    ``ended_by`` the next start closes it with (``killed``, ``node_failed``)."""

    attempt: int
    state: str
    reason: str
    ended_by: str = "killed"
    job_id: str | None = None
    slurm_state: str | None = None
    end: str | None = None

    def to_json(self) -> dict:
        return {
            "attempt": self.attempt,
            "job_id": self.job_id,
            "state": self.state,
            "ended_by": self.ended_by,
            "reason": self.reason,
            "slurm_state": self.slurm_state,
            "end": self.end,
            "decided": now(),
        }


def read_end(run_dir: Path | str, attempt: int) -> AttemptEnd | None:
    """The recorded end of ``attempt``; None when there is none, it is another attempt's, or the
    file is not this module's object (then it is ignored: the evidence decides again)."""
    try:
        data = json.loads((Path(run_dir) / ATTEMPT_END).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("attempt") != attempt or not data.get("state"):
        return None
    return AttemptEnd(
        attempt=attempt,
        state=str(data["state"]),
        reason=str(data.get("reason") or ""),
        ended_by=str(data.get("ended_by") or "killed"),
        job_id=data.get("job_id"),
        slurm_state=data.get("slurm_state"),
        end=data.get("end"),
    )


def record_end(run_dir: Path | str, end: AttemptEnd) -> bool:
    """Write ``end`` unless this attempt's end is already recorded (the first verdict stands);
    returns whether it was written. Never raises: a reader that cannot write goes on."""
    if read_end(run_dir, end.attempt) is not None:
        return False
    try:
        write_json_atomic(Path(run_dir) / ATTEMPT_END, end.to_json())
    except OSError as exc:
        log.debug("could not record the end of attempt %d in %s: %s", end.attempt, run_dir, exc)
        return False
    return True
