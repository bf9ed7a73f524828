"""One executor interface for a sweep's points, a backend per ``cluster.kind`` (submitit's habit: one
executor interface, ``submitit.LocalExecutor`` and ``submitit.SlurmExecutor`` behind it).

Every path that sends points out (a new sweep, ``resume=true``, ``grpokit resubmit``) makes the same
calls on :func:`executor_for` ``(cluster)``:

1. ``submit(sweep_dir, specs)``: the points handed over. Slurm queues them as job arrays
   (:func:`grpokit.submit.dispatch.submit_slurm`) and returns their ids; the local backend queues
   nothing (None each).
2. the caller records the ids (``manifest.json``, ``submissions.jsonl``) and releases the sweep folder.
3. ``run_pending(specs)``: what was not queued runs here. The local backend runs each point on this
   machine, one after another (:func:`grpokit.submit.dispatch.run_local`), and returns
   ``(point, driver exit status)`` pairs; Slurm has nothing pending (``[]``).

What differs otherwise is a capability, not a kind: ``runs_later`` (the jobs start later, on the
cluster, from the sweep's code snapshot; ``wait=true`` and ``grpokit status --watch`` follow them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from grpokit.config.point import PointSpec
from grpokit.submit import dispatch, no_space


class Executor:
    """How a sweep's points run; see the module docstring for the calls' order."""

    #: ``cluster.kind`` this backend serves.
    kind: ClassVar[str]
    #: The jobs start later, elsewhere, from the sweep's code snapshot (``code/``), not when ``submit`` returns.
    runs_later: ClassVar[bool]

    def submit(self, sweep_dir: Path, specs: list[PointSpec]) -> list[str | None]:
        """Hand ``specs`` over; each point's job id, in order (None: not queued, it runs in ``run_pending``)."""
        raise NotImplementedError

    def run_pending(self, specs: list[PointSpec]) -> list[tuple[PointSpec, int]]:
        """Run here what ``submit`` did not queue; ``(point, driver exit status)`` of each point run."""
        raise NotImplementedError

    def done(self, count: int, job_ids: list[str | None], *, again: bool = False) -> str:
        """What happened to ``count`` points, for the command's summary line (``again``: a resubmission)."""
        raise NotImplementedError


class SlurmBackend(Executor):
    """``cluster.kind: slurm``: one job array per request and ``MaxArraySize``, queued on Slurm."""

    kind = "slurm"
    runs_later = True

    def submit(self, sweep_dir: Path, specs: list[PointSpec]) -> list[str | None]:
        """Queue ``specs`` as job arrays (a refusal ends the command with exit 2, see
        :func:`grpokit.submit.dispatch.submit_slurm`); the Slurm ids.

        Raises:
            grpokit.submit.no_space.NoSpace: the disk filled while submitit wrote its job files.
        """
        spec_bytes = sum(no_space.BLOCK + len(s.to_json()) for s in specs)
        with no_space.writing(sweep_dir, "submitit's job files (submitit/)", spec_bytes + 2 * no_space.BLOCK):
            return list(dispatch.submit_slurm(sweep_dir, specs, specs[0].cluster))

    def run_pending(self, specs: list[PointSpec]) -> list[tuple[PointSpec, int]]:
        """Nothing runs here: every point is queued."""
        return []

    def done(self, count: int, job_ids: list[str | None], *, again: bool = False) -> str:
        """``submitted 2 point(s) as Slurm array 120`` (``resubmitted`` with ``again``)."""
        return f"{'re' if again else ''}submitted {count} point(s) as {dispatch.arrays_phrase(job_ids)}"


class LocalBackend(Executor):
    """``cluster.kind: local``: the points run on this machine, one after another, after submission."""

    kind = "local"
    runs_later = False

    def submit(self, sweep_dir: Path, specs: list[PointSpec]) -> list[str | None]:
        """Nothing is queued: None for each point."""
        return [None] * len(specs)

    def run_pending(self, specs: list[PointSpec]) -> list[tuple[PointSpec, int]]:
        """Run every point here (:func:`grpokit.submit.dispatch.run_local`), in order."""
        return list(zip(specs, dispatch.run_local(specs), strict=True))

    def done(self, count: int, job_ids: list[str | None], *, again: bool = False) -> str:
        """``ran 2 point(s) here``."""
        return f"ran {count} point(s) here"


BACKENDS: dict[str, type[Executor]] = {b.kind: b for b in (SlurmBackend, LocalBackend)}


def executor_for(cluster: Any) -> Executor:
    """The backend of a point's ``cluster`` settings (anything with ``.kind``: ``ClusterConf``, a DictConfig).

    Raises:
        ValueError: a kind with no backend (``ClusterConf`` refuses such a kind before this is asked).
    """
    try:
        return BACKENDS[str(cluster.kind)]()
    except KeyError:
        raise ValueError(f"cluster.kind={cluster.kind!r}: no executor; one of {sorted(BACKENDS)}") from None
