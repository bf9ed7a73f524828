"""``status.json`` of a run folder: the point's state and its attempts (docs/run-folder.md).

Only the in-job driver writes it, atomically (temp file + rename), so readers on the login node
never see a half-written file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

STATUS_FILE = "status.json"
FINAL_STATES = {"completed", "failed", "cancelled", "skipped_no_gpu"}


def now() -> str:
    """UTC time, ISO 8601 with seconds."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_bytes_atomic(path: Path, payload: bytes) -> None:
    """Write ``payload`` through a temp file in the same folder, fsync, ``os.replace`` it over ``path``.

    Readers on other nodes see the old file or the new one, never half of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """:func:`write_bytes_atomic` of ``data`` as indented JSON."""
    write_bytes_atomic(path, json.dumps(data, indent=2, default=str).encode())


def read_status(run_dir: Path) -> dict[str, Any]:
    """The run folder's status, or a ``pending`` one when the job has not started yet."""
    path = Path(run_dir) / STATUS_FILE
    if not path.exists():
        return {"state": "pending", "attempts": []}
    return json.loads(path.read_text())


class StatusFile:
    """The driver's handle on ``status.json``: one attempt open at a time."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / STATUS_FILE
        self.data = read_status(run_dir)
        self.data.setdefault("attempts", [])

    @property
    def attempt(self) -> int:
        """Number of the current (last) attempt, 1-based; 0 before the first."""
        return len(self.data["attempts"])

    def save(self) -> None:
        self.data["updated"] = now()
        write_json_atomic(self.path, self.data)

    def start_attempt(self, *, target_step: int | None, slurm: dict[str, Any]) -> int:
        """Open a new attempt (closing a previous one that a kill left open) and mark ``running``."""
        attempts = self.data["attempts"]
        if attempts and not attempts[-1].get("end"):
            # The previous attempt never closed: its process was killed (SIGKILL after KillWait,
            # node failure). Slurm's requeue count tells that it came back.
            attempts[-1].update(end=now(), ended_by="killed", slurm_state="requeued")
        attempts.append({"attempt": len(attempts) + 1, "start": now(), "end": None, "ended_by": None})
        self.data.update(state="running", reason="", target_step=target_step, slurm=slurm)
        self.save()
        return len(attempts)

    def update_attempt(self, **fields: Any) -> None:
        self.data["attempts"][-1].update(fields)
        self.save()

    def finish(
        self, state: str, *, ended_by: str, reason: str = "", exit_code: int | None = None, **attempt_fields: Any
    ) -> None:
        """Close the current attempt and set the point's state."""
        attempt = self.data["attempts"][-1]
        start = dt.datetime.fromisoformat(attempt["start"])
        attempt.update(
            end=now(),
            ended_by=ended_by,
            exit_code=exit_code,
            elapsed_s=round((dt.datetime.now(dt.UTC) - start).total_seconds(), 1),
            **attempt_fields,
        )
        self.data.update(state=state, reason=reason, exit_code=exit_code)
        if "last_step" in attempt_fields and attempt_fields["last_step"] is not None:
            self.data["last_step"] = attempt_fields["last_step"]
        self.save()

    def count_ended_by(self, ended_by: str) -> int:
        return sum(1 for a in self.data["attempts"] if a.get("ended_by") == ended_by)
