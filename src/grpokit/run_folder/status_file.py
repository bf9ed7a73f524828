"""``status.json`` of a run folder: the point's state and its attempts (docs/run-folder.md).

Only the in-job driver writes it (:class:`StatusFile`), atomically; every reader (the driver
itself, ``grpokit status``/``report``, ``wait=true``, resubmission, tests) goes through
:func:`read_status`.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from grpokit.run_folder.atomic import now, write_json_atomic
from grpokit.run_folder.layout import STATUS
from grpokit.run_folder.states import EndedBy, PointState


class StatusFileError(ValueError):
    """A ``status.json`` that is not the driver's JSON object; the message names the file and the fix."""


def pending_status() -> dict[str, Any]:
    """What a run folder without ``status.json`` stands for: ``{"state": "pending", "attempts": []}``."""
    return {"state": PointState.PENDING.value, "attempts": []}


def read_status(run_dir: Path | str, *, pending_if_missing: bool = True) -> dict[str, Any] | None:
    """The parsed ``<run_dir>/status.json``.

    When the job has not written one yet: :func:`pending_status` (``pending_if_missing``, the
    default), else None (the reports tell a point never started from one that recorded ``pending``).

    Raises:
        StatusFileError: the file exists but cannot be read, is not JSON, or is not an object with
            a ``state``. The driver replaces the file atomically, so this is damage, not a race.
    """
    path = Path(run_dir) / STATUS
    try:
        text = path.read_text()
    except FileNotFoundError:
        return pending_status() if pending_if_missing else None
    except OSError as exc:
        raise StatusFileError(f"{path}: cannot be read ({exc}); check the folder's permissions") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StatusFileError(
            f"{path}: not JSON ({exc}); the job's driver writes it atomically, so it was changed by hand or "
            "damaged: move it aside (the next start of the job writes a new one)"
        ) from exc
    if not isinstance(data, dict) or "state" not in data:
        raise StatusFileError(
            f"{path}: expected the driver's object with a 'state', got "
            f"{sorted(data) if isinstance(data, dict) else type(data).__name__}; move it aside"
        )
    return data


class StatusFile:
    """The driver's handle on ``status.json``: one attempt open at a time.

    Raises:
        StatusFileError: (at construction) an existing file that :func:`read_status` refuses.
    """

    def __init__(self, run_dir: Path | str):
        self.path = Path(run_dir) / STATUS
        self.data = read_status(run_dir)
        self.data.setdefault("attempts", [])

    @property
    def attempt(self) -> int:
        """Number of the current (last) attempt, 1-based; 0 before the first."""
        return len(self.data["attempts"])

    @property
    def state(self) -> PointState | str:
        """The recorded state as :class:`PointState` (a word the enum does not know is returned as is)."""
        word = self.data.get("state")
        return PointState(word) if word in PointState._value2member_map_ else word

    def save(self) -> None:
        self.data["updated"] = now()
        write_json_atomic(self.path, self.data)

    def start_attempt(
        self,
        *,
        target_step: int | None,
        slurm: dict[str, Any],
        previous_end: tuple[str, str] | None = None,
        rehearsal: bool = False,
    ) -> int:
        """Open a new attempt (closing a previous one that a kill left open) and mark ``running``.

        previous_end: ``(ended_by, reason)`` of that open attempt, from evidence
        (:func:`grpokit.run_folder.liveness.killed_attempt_reason`); None: ``killed``, no reason.
        rehearsal: the point runs the kit's stand-in trainer (``rehearse=true``), recorded as
        ``"rehearsal": true``.
        """
        attempts = self.data["attempts"]
        if attempts and not attempts[-1].get("end"):
            # The previous attempt never closed: its process was killed (SIGKILL after KillWait,
            # node failure). Slurm's requeue count tells that it came back.
            ended_by, reason = previous_end or (EndedBy.KILLED.value, None)
            attempts[-1].update(end=now(), ended_by=ended_by, slurm_state="requeued")
            if reason:
                attempts[-1]["reason"] = reason
        attempts.append({"attempt": len(attempts) + 1, "start": now(), "end": None, "ended_by": None})
        self.data.update(state=PointState.RUNNING.value, reason="", target_step=target_step, slurm=slurm)
        if rehearsal:
            self.data["rehearsal"] = True
        self.save()
        return len(attempts)

    def update_attempt(self, **fields: Any) -> None:
        self.data["attempts"][-1].update(fields)
        self.save()

    def finish(
        self, state: str, *, ended_by: str, reason: str = "", exit_code: int | None = None, **attempt_fields: Any
    ) -> None:
        """Close the current attempt and set the point's state (words of :class:`PointState` / :class:`EndedBy`)."""
        attempt = self.data["attempts"][-1]
        start = dt.datetime.fromisoformat(attempt["start"])
        attempt.update(
            end=now(),
            ended_by=str(ended_by),
            exit_code=exit_code,
            elapsed_s=round((dt.datetime.now(dt.UTC) - start).total_seconds(), 1),
            **attempt_fields,
        )
        self.data.update(state=str(state), reason=reason, exit_code=exit_code)
        if "last_step" in attempt_fields and attempt_fields["last_step"] is not None:
            self.data["last_step"] = attempt_fields["last_step"]
        self.save()

    def count_ended_by(self, ended_by: str) -> int:
        return sum(1 for a in self.data["attempts"] if a.get("ended_by") == ended_by)


def parse_time(text: str | None) -> dt.datetime | None:
    """ISO 8601 to an aware datetime (naive values are taken as UTC); None for blanks or junk."""
    if not text:
        return None
    try:
        t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def attempt_elapsed_s(attempt: dict, now: dt.datetime | None = None) -> float | None:
    """An attempt's elapsed seconds: its ``elapsed_s``, else end - start, else now - start (running)."""
    if attempt.get("elapsed_s") is not None:
        return float(attempt["elapsed_s"])
    start = parse_time(attempt.get("start"))
    if start is None:
        return None
    end = parse_time(attempt.get("end")) or now or dt.datetime.now(dt.UTC)
    return max(0.0, (end - start).total_seconds())
