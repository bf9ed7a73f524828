"""An explicit resubmission of a point: the one way a point in a final state runs again.

A point whose ``status.json`` is final (``completed``, ``failed``, ``cancelled``,
``skipped_no_gpu``) is never restarted by a requeue of its Slurm job, whoever requeues it: its
driver exits at once without touching the run folder. ``resubmit.py`` (and any explicit resume)
first writes ``<run>/resubmit.json`` = ``{"token": str, "requested": iso8601, "previous_state":
str}``; the next driver that starts in that run folder takes the token (recorded as
``status.json`` ``resubmission`` and in its attempt), runs, and from then on counts the point's
time-out requeues afresh. A token already taken never lets a final point run again.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from grpokit.run_folder import PointStatus, RunFolder, now, read_status, write_json_atomic
from grpokit.run_folder.layout import RESUBMIT

RESUBMIT_FILE = RESUBMIT


def request(run_dir: Path) -> str:
    """Login-node side: allow one more run of the point in ``run_dir``; returns the token."""
    token = f"{now()}-{secrets.token_hex(4)}"
    state = read_status(Path(run_dir)).state
    write_json_atomic(RunFolder(run_dir).resubmit, {"token": token, "requested": now(), "previous_state": state})
    return token


def pending(run_dir: Path, status: PointStatus) -> str | None:
    """Driver side: the token of a resubmission not yet taken by a run of this point, else None."""
    path = RunFolder(run_dir).resubmit
    try:
        token = json.loads(path.read_text()).get("token")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    if not token or token == status.resubmission:
        return None
    return str(token)
