"""A run folder deleted (``rm -rf``) or moved away under a running point (issue 36.5).

The run folder is the point's record: ``status.json``, ``point.json``, its attempts. When the
user removes it while the job runs, the point was taken away on purpose, not crashed: the driver
stops it with that reason, retries nothing (no requeue, no node excluded) and recreates nothing
(no ``status.json`` in a new empty folder); the job ends. The driver notes the folder's identity
(device and inode) when it opens the attempt; :func:`gone` compares it with what the path holds
now, so a folder deleted and recreated by someone else (a writer's ``mkdir -p``) counts as gone too.
:func:`grpokit.runtime.decisions.outcome.decide` puts the reason first: ``cancelled``,
``ended_by: run_folder_gone``, never ``requeue``.
"""

from __future__ import annotations

from pathlib import Path

#: ``ended_by`` of an attempt whose run folder was deleted or moved while it ran.
ENDED_BY = "run_folder_gone"

#: A folder's identity: ``(st_dev, st_ino)`` of its ``os.stat``; None when the path holds nothing.
Identity = tuple[int, int] | None


def gone(opened: Identity, now: Identity) -> bool:
    """Whether the run folder noted at the attempt's open (``opened``) is no longer at its path.

    Args:
        opened: the folder's identity when the attempt opened (None: not noted, never gone).
        now: what the path holds now (None: nothing).
    """
    return opened is not None and now != opened


def reason(run_dir: Path | str) -> str:
    """The one line the job's log (its stderr) and ``grpokit status`` give for the stopped point."""
    return (
        f"run folder {run_dir} was deleted or moved while the point ran: the point was stopped, "
        "not retried, no node excluded, nothing recreated"
    )
