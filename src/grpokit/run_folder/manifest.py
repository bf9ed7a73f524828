"""``manifest.json`` of a sweep folder: the points, their overrides, Slurm ids and run folders.

Written by the sweep command (:func:`write_manifest`); ``resume=true`` and ``resubmit`` rewrite only
the ids of the points they resubmit (:func:`replace_job_ids`). Format: docs/run-folder.md.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpokit.run_folder.atomic import now, write_json_atomic
from grpokit.run_folder.json_record import Spec, checked_fields, is_int, is_str, list_of, optional
from grpokit.run_folder.layout import MANIFEST

if TYPE_CHECKING:
    from grpokit.config.point import PointSpec


class ManifestError(ValueError):
    """``manifest.json`` cannot be read as a sweep's manifest; ``str()`` is one line naming the file and key."""


def slurm_ids(job_id: str | None) -> dict[str, Any]:
    """A manifest entry's Slurm fields from submitit's id ``ARRAY_TASK`` (all None when not submitted)."""
    array_job_id, _, task = (job_id or "").partition("_")
    return {"job_id": job_id, "array_job_id": array_job_id or None, "array_task_id": int(task) if task else None}


@dataclasses.dataclass
class ReplacedJob:
    """One entry of a point's ``history``: the Slurm id it had (None: never submitted), the state it
    was resubmitted from, and when (ISO time)."""

    job_id: str | None
    state: str
    replaced: str


@dataclasses.dataclass
class ManifestPoint:
    """One point of the manifest (``points[i]``). index, name, run_dir (absolute; a relative one is
    taken relative to the sweep folder by readers), overrides (the command line's), swept ({key:
    value}); the Slurm ids of its current job (None: not submitted), when it was submitted, and the
    jobs it replaced (``history``, never lost)."""

    index: int
    name: str
    run_dir: str
    overrides: list[str] = dataclasses.field(default_factory=list)
    swept: dict[str, Any] = dataclasses.field(default_factory=dict)
    job_id: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None
    submitted: str | None = None
    history: list[ReplacedJob] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, spec: PointSpec, job_id: str | None = None) -> ManifestPoint:
        """The entry of a point just written (``job_id``: its Slurm id, None when not submitted)."""
        return cls(
            index=spec.index,
            name=spec.name,
            run_dir=spec.run_dir,
            overrides=list(spec.kit_overrides),
            swept=dict(spec.swept),
            **slurm_ids(job_id),
            submitted=now() if job_id else None,
        )

    @property
    def display_job_id(self) -> str | None:
        """The Slurm id to ask about (``123`` or ``123_4``): job_id, else ``<array_job_id>_<array_task_id>``."""
        if self.job_id:
            return str(self.job_id)
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return None

    def replace_job(self, job_id: str | None, state: str) -> None:
        """Record a resubmission: the current id goes to ``history`` (with ``state``), ``job_id`` becomes current."""
        self.history.append(ReplacedJob(self.job_id, state, now()))
        for key, value in slurm_ids(job_id).items():
            setattr(self, key, value)
        self.submitted = now()

    def to_json(self) -> dict[str, Any]:
        """The entry's JSON object, its keys in the order the sweep command has always written them."""
        return {
            "index": self.index,
            "name": self.name,
            "overrides": list(self.overrides),
            "swept": dict(self.swept),
            "run_dir": self.run_dir,
            "job_id": self.job_id,
            "array_job_id": self.array_job_id,
            "array_task_id": self.array_task_id,
            "submitted": self.submitted,
            "history": [dataclasses.asdict(h) for h in self.history],
        }


#: A top-level key only some manifests have: written only when its value is not None.
_ONLY_WHEN_SET = ("code", "submission_refused")


@dataclasses.dataclass
class SweepManifest:
    """``manifest.json`` (docs/run-folder.md). A key absent from an older (or hand-written)
    manifest reads as its default here: ``sweep``/``created``/``experiment``/``cluster`` None,
    ``swept_keys`` None (readers derive them from the points), ``dry_run``/``rehearsal`` False,
    ``code`` absent (``code_recorded`` False; ``"code": null`` means live code), ``submission_refused`` None."""

    points: list[ManifestPoint]
    sweep: str | None = None
    created: str | None = None
    experiment: str | None = None
    cluster: str | None = None
    swept_keys: list[str] | None = None
    dry_run: bool = False
    rehearsal: bool = False
    code: dict[str, Any] | None = None
    code_recorded: bool = False
    submission_refused: str | None = None

    def point(self, index: int) -> ManifestPoint | None:
        """The entry with this ``index`` (None when the sweep has none)."""
        return next((p for p in self.points if p.index == index), None)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of docs/run-folder.md (``code`` only when recorded, ``submission_refused`` only when set)."""
        out: dict[str, Any] = {
            "sweep": self.sweep,
            "created": self.created,
            "experiment": self.experiment,
            "cluster": self.cluster,
            "swept_keys": self.swept_keys,
            "dry_run": self.dry_run,
            "rehearsal": self.rehearsal,
            "points": [p.to_json() for p in self.points],
        }
        if self.code_recorded:
            out["code"] = self.code
        if self.submission_refused is not None:
            out["submission_refused"] = self.submission_refused
        return out

    def write(self, sweep_dir: Path | str) -> Path:
        """Write ``<sweep_dir>/manifest.json`` atomically; returns its path."""
        path = Path(sweep_dir) / MANIFEST
        write_json_atomic(path, self.to_json())
        return path

    @classmethod
    def from_json(cls, data: Any, source: Path | str = MANIFEST) -> SweepManifest:
        """The manifest of a parsed ``manifest.json``; ``source`` names the file in errors.

        Raises:
            ManifestError: not an object, no ``points`` list, an unknown key, a point without
                ``index``/``name``/``run_dir``, or a value of the wrong type.
        """
        if not isinstance(data, dict) or not isinstance(data.get("points"), list):
            raise ManifestError(f"{source} has no 'points' list; was it written by 'grpokit sweep'?")
        top = _fields(data, _TOP, source, "")
        points = []
        for i, raw in enumerate(top.pop("points")):
            f = _fields(raw, _POINT, source, f"points[{i}].")
            history = f.pop("history") or []
            entries = [
                ReplacedJob(**_fields(h, _HISTORY, source, f"points[{i}].history[{j}].")) for j, h in enumerate(history)
            ]
            points.append(ManifestPoint(**{k: v for k, v in f.items() if v is not None}, history=entries))
        code_recorded = "code" in data
        defaults = {"dry_run": False, "rehearsal": False}
        return cls(
            points=points,
            **{k: (defaults[k] if v is None and k in defaults else v) for k, v in top.items()},
            code_recorded=code_recorded,
        )


# -- reading: each key, whether it must be there, and what its value must be ------------------------------
#: key -> (required, check, what the value must be)
_TOP: Spec = {
    "sweep": (False, optional(is_str), "the sweep's name"),
    "created": (False, optional(is_str), "an ISO time"),
    "experiment": (False, optional(is_str), "the experiment's name"),
    "cluster": (False, optional(is_str), "the cluster kind"),
    "swept_keys": (False, optional(list_of(is_str)), "a list of keys"),
    "dry_run": (False, optional(lambda v: isinstance(v, bool)), "true or false"),
    "rehearsal": (False, optional(lambda v: isinstance(v, bool)), "true or false"),
    "code": (False, optional(lambda v: isinstance(v, dict)), "the code snapshot's {path, commit, dirty} or null"),
    "submission_refused": (False, optional(is_str), "sbatch's refusal"),
    "points": (True, lambda v: isinstance(v, list), "a list of points"),
}
_POINT: Spec = {
    "index": (True, is_int, "the point's index"),
    "name": (True, is_str, "the point's name"),
    "run_dir": (True, is_str, "the run folder's path"),
    "overrides": (False, optional(list_of(is_str)), "a list of overrides"),
    "swept": (False, optional(lambda v: isinstance(v, dict)), "{key: value}"),
    "job_id": (False, optional(is_str), "a Slurm id or null"),
    "array_job_id": (False, optional(is_str), "a Slurm array id or null"),
    "array_task_id": (False, optional(is_int), "a task index or null"),
    "submitted": (False, optional(is_str), "an ISO time or null"),
    "history": (False, optional(lambda v: isinstance(v, list)), "a list of replaced jobs"),
}
_HISTORY: Spec = {
    "job_id": (True, optional(is_str), "a Slurm id or null"),
    "state": (True, is_str, "the state it was replaced in"),
    "replaced": (True, is_str, "an ISO time"),
}


def _fields(data: Any, spec: Spec, source: Path | str, where: str) -> dict[str, Any]:
    """``data``'s values by ``spec`` (an optional key that is absent: None), or the error naming the key."""
    return checked_fields(data, spec, source, where, error=ManifestError, writer="the sweep command")


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
    manifest = SweepManifest(
        sweep=specs[0].sweep_name if specs else Path(sweep_dir).name,
        created=now(),
        experiment=experiment,
        cluster=cluster,
        swept_keys=swept_keys,
        dry_run=dry_run,
        # rehearse=true: the points run the kit's stand-in trainer (grpokit.rehearsal), not verl's
        rehearsal=any(s.runtime.rehearsal for s in specs),
        points=[ManifestPoint.of(s, j) for s, j in zip(specs, job_ids, strict=True)],
    )
    return manifest.write(sweep_dir)


def replace_job_ids(manifest: SweepManifest, new: dict[int, tuple[str | None, str]]) -> list[ManifestPoint]:
    """Record resubmissions in a manifest (in place): ``new[index] = (new job id, state it replaced)``.

    The replaced id is appended to the entry's ``history`` (never lost); returns the entries changed.
    """
    changed = []
    for entry in manifest.points:
        if entry.index in new:
            entry.replace_job(*new[entry.index])
            changed.append(entry)
    return changed


def read_manifest(sweep_dir: Path) -> SweepManifest:
    """The manifest of ``sweep_dir``.

    Raises:
        FileNotFoundError: no manifest there (not a sweep folder written by the sweep command).
        ManifestError: the file is not JSON, has no ``points`` list, or a key this kit does not
            know or a value of the wrong type (a ``ValueError``; the message names the file and key).
    """
    path = Path(sweep_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: pass a sweep folder (logs/<sweep_name>) written by 'grpokit sweep'")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"{path}: not JSON ({exc}); the sweep command writes it atomically, so it was damaged"
        ) from None
    return SweepManifest.from_json(data, path)
