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


@dataclass
class Point:
    """One sweep point as the manifest and its run folder describe it.

    index, name, swept ({key: value}), run_dir: from the manifest. job_id: the Slurm display id to
    ask about (``123`` or ``123_4``), None before submission. status: its status.json's record, None
    when the job has not written one yet (or it is damaged).
    """

    index: int
    name: str
    run_dir: Path
    swept: dict = field(default_factory=dict)
    job_id: str | None = None
    status: PointStatus | None = None

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """status.json's attempts (() without status)."""
        return self.status.attempts if self.status is not None else ()

    @property
    def gpus(self) -> int | None:
        """GPUs of the allocation (status.json's slurm.gpus), None when not yet known."""
        slurm = self.status.slurm if self.status is not None else None
        return slurm.gpus if slurm is not None else None


@dataclass
class Sweep:
    """A sweep folder: path, its manifest, its swept keys and points."""

    path: Path
    manifest: SweepManifest
    swept_keys: list[str]
    points: list[Point]

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
    points = []
    for entry in manifest.points:
        run_dir = Path(entry.run_dir)
        if not run_dir.is_absolute():
            run_dir = path / run_dir
        points.append(
            Point(
                index=entry.index,
                name=entry.name,
                run_dir=run_dir,
                swept=dict(entry.swept),
                job_id=entry.display_job_id,
                status=read_status_or_none(run_dir),
            )
        )
    swept_keys = list(manifest.swept_keys or sorted({k for p in points for k in p.swept}))
    return Sweep(path=path, manifest=manifest, swept_keys=swept_keys, points=sorted(points, key=lambda p: p.index))
