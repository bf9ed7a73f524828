"""This user's jobs of one name that Slurm holds, and when each was submitted.

A halving controller asks it before submitting again what an interrupted controller may already
have submitted (:func:`grpokit.submit.halving_controller.advance`): ``squeue`` shows finished jobs
too for ``MinJobAge`` seconds, and works where accounting (``sacct``) is off.
"""

from __future__ import annotations

import contextlib
import datetime as dt

from grpokit.slurm.cluster import run_slurm

#: squeue's output format: the display id (``%i``: ``123`` or ``123_4``) and the submission time
#: (``%V``: ``YYYY-MM-DDTHH:MM:SS`` in the cluster's local time), squeue(1) ``--format``.
SUBMITTED_FORMAT = "%i|%V"


def submitted_since(squeue_out: str, since: str) -> list[str]:
    """Job ids of ``squeue -h -o '%i|%V'`` lines (e.g. ``1606|2026-12-05T02:24:15``; ``%V`` in the
    cluster's local time) submitted at or after ``since`` (an ISO time with its zone, e.g. the
    kit's UTC ``now()``); lines without a time (``N/A``) are left out."""
    after = dt.datetime.fromisoformat(since).astimezone().replace(tzinfo=None, microsecond=0)
    ids = []
    for line in squeue_out.split():
        job, _, submitted = line.partition("|")
        with contextlib.suppress(ValueError):
            if dt.datetime.fromisoformat(submitted) >= after:
                ids.append(job)
    return ids


def queued_since(job_name: str, since: str) -> list[str]:
    """Ids of this user's jobs named ``job_name`` that Slurm submitted at or after ``since`` (ISO time),
    as ``squeue -h --me --name <job_name> -t all -o '%i|%V'`` still shows them.

    Raises:
        grpokit.slurm.cluster.SlurmQueryError: ``squeue`` failed or did not answer.
    """
    out = run_slurm(["squeue", "-h", "--me", "--name", job_name, "-t", "all", "-o", SUBMITTED_FORMAT])
    return submitted_since(out, since)
