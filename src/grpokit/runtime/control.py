"""Files through which the job's driver asks the trainer to checkpoint and stop (``<run>/control/``).

A file, not a signal: verl's training loop runs inside a Ray actor, which signals sent to the
trainer's main process never reach, and a file works across nodes on a shared file system.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grpokit.run_folder import RunFolder, now, write_json_atomic
from grpokit.run_folder.layout import SAVE_REQUEST, SAVED_FOR_REQUEUE

ENV = "GRPOKIT_CONTROL_DIR"
SAVED = SAVED_FOR_REQUEUE


def control_dir(run_dir: Path) -> Path:
    return RunFolder(run_dir).control


def request_save(ctl: Path, reason: str) -> None:
    """Ask the trainer to checkpoint at its next step boundary and then stop."""
    write_json_atomic(ctl / SAVE_REQUEST, {"reason": reason, "requested_at": now()})


def save_requested(ctl: Path | None = None) -> dict[str, Any] | None:
    """The pending request (trainer side; ``ctl`` defaults to ``$GRPOKIT_CONTROL_DIR``)."""
    ctl = ctl or (Path(os.environ[ENV]) if os.environ.get(ENV) else None)
    if ctl is None or not (ctl / SAVE_REQUEST).exists():
        return None
    try:
        return json.loads((ctl / SAVE_REQUEST).read_text())
    except (json.JSONDecodeError, OSError):
        return {"reason": "unknown"}


def mark_saved(ctl: Path, step: int, checkpoint_dir: str) -> None:
    """Trainer side: the checkpoint of ``step`` is complete (tracker written) and it stops now."""
    write_json_atomic(ctl / SAVED, {"step": step, "checkpoint_dir": checkpoint_dir, "saved_at": now()})


def saved_marker(ctl: Path) -> dict[str, Any] | None:
    path = ctl / SAVED
    return json.loads(path.read_text()) if path.exists() else None


def reset(ctl: Path) -> None:
    """Clear both files at the start of an attempt."""
    ctl.mkdir(parents=True, exist_ok=True)
    for name in (SAVE_REQUEST, SAVED):
        (ctl / name).unlink(missing_ok=True)
