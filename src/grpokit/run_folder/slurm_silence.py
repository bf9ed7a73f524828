"""``<sweep>/slurm_unanswered.json``: since when Slurm has not answered ``status`` (issue 36 item 6).

``status`` asks Slurm's clients within a few seconds; when slurmctld does not answer it shows the
points from their run folders and one line saying since when Slurm has not answered. The first
unanswered ask is recorded here (``{"since": UTC ISO time, "error": one line}``) and kept while
Slurm stays silent; the first answer removes the file. A reader that cannot write goes on (the line
then counts from this ask).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

from grpokit.run_folder.atomic import write_json_atomic
from grpokit.run_folder.layout import SLURM_SILENCE

log = logging.getLogger(__name__)


def note_unanswered(sweep_dir: Path | str, error: str, now: dt.datetime) -> dt.datetime:
    """Record an unanswered ask (only the first of a silence is kept); returns since when Slurm has
    not answered (``now`` for the first one). Never raises."""
    path = Path(sweep_dir) / SLURM_SILENCE
    try:
        since = dt.datetime.fromisoformat(json.loads(path.read_text())["since"])
        return since if since.tzinfo else since.replace(tzinfo=dt.UTC)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        write_json_atomic(path, {"since": now.isoformat(timespec="seconds"), "error": error})
    except OSError as exc:
        log.debug("could not record Slurm's silence in %s: %s", path, exc)
    return now


def note_answered(sweep_dir: Path | str) -> None:
    """Slurm answered: the silence is over (the file is removed). Never raises."""
    try:
        (Path(sweep_dir) / SLURM_SILENCE).unlink(missing_ok=True)
    except OSError as exc:
        log.debug("could not remove %s: %s", Path(sweep_dir) / SLURM_SILENCE, exc)


def silence_line(since: dt.datetime, now: dt.datetime, error: str) -> str:
    """The one line ``status`` prints: ``Slurm has not answered since 2026-12-04 23:41:02 UTC (12 min;
    squeue: no answer within 4 s): states are from the run folders (status.json, heartbeat.json)``."""
    minutes = max(0, int((now - since).total_seconds() // 60))
    ago = f"{minutes} min" if minutes else "under a minute"
    when = since.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"Slurm has not answered since {when} ({ago}; {error}): states are from the run folders "
        "(status.json, heartbeat.json); check slurmctld (scontrol ping)"
    )
