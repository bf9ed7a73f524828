"""Read a sweep folder (``logs/<sweep_name>/``): its manifest and each point's ``status.json``.

Format: docs/run-folder.md. Nothing here writes; the job and ``sweep.py`` own these files.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from grpokit.runtime.status import STATUS_FILE
from grpokit.submit.manifest import MANIFEST

log = logging.getLogger(__name__)

STATUS = STATUS_FILE


@dataclass
class Point:
    """One sweep point as the manifest and its run folder describe it.

    index, name, swept ({key: value}), run_dir: from the manifest. job_id: the Slurm display id to
    ask about (``123`` or ``123_4``), None before submission. status: the parsed status.json, None
    when the job has not written one yet.
    """

    index: int
    name: str
    run_dir: Path
    swept: dict = field(default_factory=dict)
    job_id: str | None = None
    status: dict | None = None

    @property
    def attempts(self) -> list[dict]:
        """status.json's attempts list ([] without status)."""
        return list((self.status or {}).get("attempts") or [])

    @property
    def gpus(self) -> int | None:
        """GPUs of the allocation (status.json's slurm.gpus), None when not yet known."""
        g = ((self.status or {}).get("slurm") or {}).get("gpus")
        return int(g) if g is not None else None


@dataclass
class Sweep:
    """A sweep folder: path, the manifest's top-level fields, its swept keys and points."""

    path: Path
    manifest: dict
    swept_keys: list[str]
    points: list[Point]

    @property
    def name(self) -> str:
        return str(self.manifest.get("sweep") or self.path.name)


def point_job_id(entry: dict) -> str | None:
    """The Slurm display id of a manifest point: job_id, else ``<array_job_id>_<array_task_id>``."""
    if entry.get("job_id"):
        return str(entry["job_id"])
    if entry.get("array_job_id") and entry.get("array_task_id") is not None:
        return f"{entry['array_job_id']}_{entry['array_task_id']}"
    return None


def read_status(run_dir: Path) -> dict | None:
    """Parsed ``<run_dir>/status.json``; None when absent or unreadable (a warning says which)."""
    path = run_dir / STATUS
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        # The driver replaces the file atomically, so this is damage, not a race; show the point anyway.
        log.warning("%s unreadable (%s); showing the point without it", path, exc)
        return None


def load_sweep(path: Path | str) -> Sweep:
    """Load ``<path>/manifest.json`` and each point's status.json.

    Raises FileNotFoundError when the manifest is missing (pass the sweep folder,
    ``logs/<sweep_name>``, not a run folder) and ValueError when it lacks ``points``.
    A relative ``run_dir`` in the manifest is taken relative to the sweep folder.
    """
    path = Path(path)
    mpath = path / MANIFEST
    if not mpath.exists():
        raise FileNotFoundError(f"{mpath} not found: pass a sweep folder (logs/<sweep_name>) written by sweep.py")
    manifest = json.loads(mpath.read_text())
    if "points" not in manifest:
        raise ValueError(f"{mpath} has no 'points' list; was it written by sweep.py?")
    points = []
    for entry in manifest["points"]:
        run_dir = Path(entry["run_dir"])
        if not run_dir.is_absolute():
            run_dir = path / run_dir
        points.append(
            Point(
                index=int(entry["index"]),
                name=str(entry.get("name", run_dir.name)),
                run_dir=run_dir,
                swept=dict(entry.get("swept") or {}),
                job_id=point_job_id(entry),
                status=read_status(run_dir),
            )
        )
    swept_keys = list(manifest.get("swept_keys") or sorted({k for p in points for k in p.swept}))
    return Sweep(path=path, manifest=manifest, swept_keys=swept_keys, points=sorted(points, key=lambda p: p.index))


def parse_time(text: str | None) -> datetime | None:
    """ISO 8601 to an aware datetime (naive values are taken as UTC); None for blanks or junk."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def attempt_elapsed_s(attempt: dict, now: datetime | None = None) -> float | None:
    """An attempt's elapsed seconds: its ``elapsed_s``, else end - start, else now - start (running)."""
    if attempt.get("elapsed_s") is not None:
        return float(attempt["elapsed_s"])
    start = parse_time(attempt.get("start"))
    if start is None:
        return None
    end = parse_time(attempt.get("end")) or now or datetime.now(UTC)
    return max(0.0, (end - start).total_seconds())
