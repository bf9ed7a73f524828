"""Read a sweep folder (``logs/<sweep_name>/``): its manifest and each point's ``status.json``.

Format: docs/run-folder.md. Nothing here writes; the job and the sweep command own these files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from grpokit.run_folder.layout import MANIFEST
from grpokit.run_folder.manifest import SweepManifest, read_manifest
from grpokit.run_folder.status_record import Attempt, PointStatus, read_status_or_none
from grpokit.slurm.nodes import node_count


@dataclass
class Point:
    """One sweep point as the manifest and its run folder describe it.

    index, name, swept ({key: value}), run_dir: from the manifest. job_id: the Slurm display id to
    ask about (``123`` or ``123_4``), None before submission. status: its status.json's record, None
    when the job has not written one yet (or it is damaged). missing: the run folder is not there
    (deleted, or moved away): :func:`missing_reason` says so.
    """

    index: int
    name: str
    run_dir: Path
    swept: dict = field(default_factory=dict)
    job_id: str | None = None
    status: PointStatus | None = None
    missing: bool = False

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """status.json's attempts (() without status)."""
        return self.status.attempts if self.status is not None else ()

    @property
    def gpus(self) -> int | None:
        """GPUs of the whole allocation: status.json's ``slurm.gpus`` (the GPUs the driver saw on
        its own node) x the nodes of ``slurm.nodelist`` (1 when it names none, e.g. outside Slurm).
        None when not yet known."""
        slurm = self.status.slurm if self.status is not None else None
        if slurm is None or slurm.gpus is None:
            return None
        return slurm.gpus * (node_count(slurm.nodelist) or 1)


@dataclass
class Sweep:
    """A sweep folder: path, its manifest, its swept keys and points. moved_from: where the manifest
    says the sweep folder was (its run folders' parent) when it was moved from there to ``path``
    (the points are then read where they are now; :func:`moved_line` says what to do)."""

    path: Path
    manifest: SweepManifest
    swept_keys: list[str]
    points: list[Point]
    moved_from: Path | None = None

    @property
    def name(self) -> str:
        return self.manifest.sweep or self.path.name

    def only(self, run_folder_name: str) -> Sweep:
        """This sweep with one point: the one whose run folder is named ``run_folder_name``.

        Raises:
            ValueError: no point of the manifest has that run folder.
        """
        kept = [p for p in self.points if Path(p.run_dir).name == run_folder_name]
        if not kept:
            raise ValueError(f"{self.path / MANIFEST} lists no point with run folder {run_folder_name}")
        return dataclasses.replace(self, points=kept)

    @property
    def rehearsal(self) -> bool:
        """``rehearse=true``: the points ran the kit's stand-in trainer (the manifest or a status.json says so)."""
        return self.manifest.rehearsal or any(p.status is not None and p.status.rehearsal for p in self.points)


def load_sweep(path: Path | str) -> Sweep:
    """Load ``<path>/manifest.json`` and each point's status.json.

    Raises FileNotFoundError when the manifest is missing (pass the sweep folder,
    ``logs/<sweep_name>``, not a run folder) and :class:`~grpokit.run_folder.manifest.ManifestError`
    (a ValueError) when it is not a manifest.
    A relative ``run_dir`` in the manifest is taken relative to the sweep folder.
    """
    path = Path(path)
    manifest = read_manifest(path)
    points, moved_from = [], None
    for entry in manifest.points:
        run_dir = Path(entry.run_dir)
        if not run_dir.is_absolute():
            run_dir = path / run_dir
        if not run_dir.is_dir() and (path / run_dir.name).is_dir() and not _same(run_dir.parent, path):
            moved_from, run_dir = run_dir.parent, path / run_dir.name  # the sweep folder was moved here
        points.append(
            Point(
                index=entry.index,
                name=entry.name,
                run_dir=run_dir,
                swept=dict(entry.swept),
                job_id=entry.display_job_id,
                status=read_status_or_none(run_dir),
                missing=not run_dir.is_dir(),
            )
        )
    swept_keys = list(manifest.swept_keys or sorted({k for p in points for k in p.swept}))
    points.sort(key=lambda p: p.index)
    return Sweep(path=path, manifest=manifest, swept_keys=swept_keys, points=points, moved_from=moved_from)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def moved_line(sweep: Sweep) -> str | None:
    """One line for a sweep folder moved away from where it was submitted (None when it was not)."""
    if sweep.moved_from is None:
        return None
    old, here = sweep.moved_from, sweep.path
    return (
        f"sweep folder {here} was moved here from {old}: its jobs and point.json files still name {old} "
        f"(a job that starts now fails: Slurm JobLaunchFailure). Move it back (mv {here} {old}), then "
        f"`grpokit resubmit {old}` resubmits the points that failed"
    )


def missing_reason(point: Point) -> str:
    """The reason shown for a point whose run folder is not there (deleted, or moved away)."""
    return (
        f"run folder {point.run_dir} is missing (deleted or moved away; a running point stops itself): "
        "move it back to see or resubmit the point; a deleted one can only be trained again in a new sweep"
    )
