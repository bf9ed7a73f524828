"""``manifest.json`` of a sweep folder: the points, their overrides, Slurm ids and run folders.

Written by the sweep command (:func:`write_manifest`); ``resume=true`` and ``resubmit`` rewrite only
the ids of the points they resubmit (:func:`replace_job_ids`). Format: docs/run-folder.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpokit.run_folder.atomic import now, write_json_atomic
from grpokit.run_folder.layout import MANIFEST

if TYPE_CHECKING:
    from grpokit.config.point import PointSpec


def slurm_ids(job_id: str | None) -> dict[str, Any]:
    """A manifest entry's Slurm fields from submitit's id ``ARRAY_TASK`` (all None when not submitted)."""
    array_job_id, _, task = (job_id or "").partition("_")
    return {"job_id": job_id, "array_job_id": array_job_id or None, "array_task_id": int(task) if task else None}


def point_entry(spec: PointSpec, job_id: str | None = None) -> dict[str, Any]:
    return {
        "index": spec.index,
        "name": spec.name,
        "overrides": spec.kit_overrides,
        "swept": spec.swept,
        "run_dir": spec.run_dir,
        **slurm_ids(job_id),
        "submitted": now() if job_id else None,
        "history": [],
    }


def write_manifest(
    sweep_dir: Path,
    specs: list[PointSpec],
    job_ids: list[str | None],
    *,
    experiment: str,
    cluster: str,
    swept_keys: list[str],
    dry_run: bool = False,
) -> Path:
    """Write the manifest (atomically); ``job_ids[i]`` is point i's Slurm id (None when not submitted).

    ``dry_run``: the points were only validated (a dry run's manifest; a real sweep may take the
    folder over, see :mod:`grpokit.run_folder.claim`).
    """
    data = {
        "sweep": specs[0].sweep_name if specs else sweep_dir.name,
        "created": now(),
        "experiment": experiment,
        "cluster": cluster,
        "swept_keys": swept_keys,
        "dry_run": dry_run,
        # rehearse=true: the points run the kit's stand-in trainer (grpokit.rehearsal), not verl's
        "rehearsal": any(s.runtime.rehearsal for s in specs),
        "points": [point_entry(s, j) for s, j in zip(specs, job_ids, strict=True)],
    }
    path = Path(sweep_dir) / MANIFEST
    write_json_atomic(path, data)
    return path


def replace_job_ids(manifest: dict[str, Any], new: dict[int, tuple[str | None, str]]) -> list[dict[str, Any]]:
    """Record resubmissions in a manifest (in place): ``new[index] = (new job id, state it replaced)``.

    The replaced id is appended to the entry's ``history`` (never lost); returns the entries changed.
    """
    changed = []
    for entry in manifest["points"]:
        if entry["index"] not in new:
            continue
        job_id, state = new[entry["index"]]
        entry.setdefault("history", []).append({"job_id": entry.get("job_id"), "state": state, "replaced": now()})
        entry.update(**slurm_ids(job_id), submitted=now())
        changed.append(entry)
    return changed


def read_manifest(sweep_dir: Path) -> dict[str, Any]:
    """The parsed manifest of ``sweep_dir``.

    Raises:
        FileNotFoundError: no manifest there (not a sweep folder written by the sweep command).
        ValueError: the file is not JSON or has no ``points`` list (the message names the file).
    """
    path = Path(sweep_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: pass a sweep folder (logs/<sweep_name>) written by 'grpokit sweep'")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not JSON ({exc}); the sweep command writes it atomically, so it was damaged"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise ValueError(f"{path} has no 'points' list; was it written by 'grpokit sweep'?")
    return data
