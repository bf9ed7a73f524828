"""``<run>/status.json``: a point's state and its attempts, as typed records (the format's owner).

Written by the in-job driver (:class:`grpokit.run_folder.status_file.StatusFile`), by a successive
halving controller that prunes a point (``state``, ``reason``, ``halving``) and by ``cancel`` for a
point cancelled before its job started (:func:`write_status`); read by everyone else through
:func:`read_status`. Format (JSON object; docs/run-folder.md shows an example)::

    {"state": str (a grpokit.run_folder.states.PointState word; older kits also wrote timeout,
               preempted, sidecar_failed), "reason": str, "exit_code": int | null,
     "target_step": int | null, "last_step": int,
     "slurm": {"job_id": str, "array_job_id": str | null, "array_task_id": int | null,
               "restart_count": int, "nodelist": str, "partition": str, "gpus": int} ({} outside Slurm),
     "resubmission": str (the resubmit.json token taken), "rehearsal": true,
     "halving": {"stage": int, "rung": int (steps), "rank": int} (a point pruned by successive halving),
     "attempts": [{"attempt": int (1-based), "start": iso8601, "end": iso8601 | null,
                   "ended_by": str | null (an EndedBy word), "slurm_state": str | null,
                   "exit_code": int | null, "first_step": int, "last_step": int | null,
                   "elapsed_s": float (seconds) | null, "resubmission": str, "crash": str,
                   "nodes": [str], "reason": str, "retry": str, "resume_step": int | null,
                   "compile_cache_seeded_from": str, "checkpoint_set_aside": str,
                   "timings": {str: float (seconds)}}],
     "updated": iso8601}

Only ``state`` (and an attempt's ``attempt`` and ``start``) must be there; every other key is
optional and may be null (a key the writer never set is absent, one it set to None is null: the
records keep that difference, so a file read and written back keeps its keys). A key this module
does not know, a missing required key or a value of the wrong type is a :class:`StatusFileError`
naming the file and the key; nothing is guessed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from grpokit.run_folder.atomic import write_json_atomic
from grpokit.run_folder.json_record import Spec, checked_fields, is_dict, is_int, is_number, is_str, list_of
from grpokit.run_folder.layout import STATUS
from grpokit.run_folder.states import PointState

_WRITER = "the job's driver"


class StatusFileError(ValueError):
    """A ``status.json`` that is not the driver's JSON object; the message names the file and the key or the fix."""


def _nulls() -> Any:
    """The ``null_keys`` field: the keys the file holds as null (kept out of equality and repr)."""
    return dataclasses.field(default=frozenset(), compare=False, repr=False)


class _Record:
    """``to_json`` / ``with_fields`` of the records below: a field is written when it is not None or
    the file held it as null (``null_keys``); nested records write their own JSON."""

    null_keys: frozenset[str]

    @classmethod
    def from_json(cls, data: Any, source: Path | str = STATUS) -> Self:
        """The record of one decoded JSON object (each record reads its own keys)."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the module's format (absent keys stay absent, null ones null)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name == "null_keys" or (value is None and f.name not in self.null_keys):
                continue
            out[f.name] = _json_value(value)
        return out

    def with_fields(self, **fields: Any) -> Self:
        """This record with ``fields`` set (JSON values, like ``dict.update`` of the file's object:
        None writes the key as null), read back through the same key check as the file.

        Raises:
            StatusFileError: an unknown key or a value of the wrong type (a bug of the writer).
        """
        return type(self).from_json({**self.to_json(), **fields})


def _json_value(value: Any) -> Any:
    if isinstance(value, _Record | HalvingMark):
        return value.to_json()
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value


@dataclasses.dataclass(frozen=True)
class SlurmAllocation(_Record):
    """``slurm``: the allocation of the job run that wrote the file (all None outside Slurm).
    job_id: the job's own id; array_job_id / array_task_id: its array and task; restart_count:
    Slurm's requeues of the job; nodelist, partition; gpus: GPUs the driver saw on its node."""

    job_id: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None
    restart_count: int | None = None
    nodelist: str | None = None
    partition: str | None = None
    gpus: int | None = None
    null_keys: frozenset[str] = _nulls()

    @property
    def display_id(self) -> str | None:
        """``<array>_<task>`` in an array, else the job id; None outside Slurm."""
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id) if self.job_id else None

    @property
    def ids(self) -> set[str]:
        """Every id Slurm knows this job by (``job_id``, and ``<array>_<task>`` in an array); empty outside Slurm."""
        if not self.job_id:
            return set()
        ids = {str(self.job_id)}
        if self.array_job_id and self.array_task_id is not None:
            ids.add(f"{self.array_job_id}_{self.array_task_id}")
        return ids

    @classmethod
    def from_json(cls, data: Any, source: Path | str = STATUS) -> SlurmAllocation:
        return cls(**_fields(data, _SLURM, source, "slurm."), null_keys=_null_keys(data))


@dataclasses.dataclass(frozen=True)
class HalvingMark:
    """``halving``: the successive-halving stage whose controller pruned the point, its rung (steps)
    and the point's rank there (1 = best)."""

    stage: int
    rung: int
    rank: int

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Attempt(_Record):
    """One start of the point's job (``attempts[k-1]``): see the module's format. ``end`` None: open
    (running, or killed before the driver closed it)."""

    attempt: int
    start: str
    end: str | None = None
    ended_by: str | None = None
    slurm_state: str | None = None
    exit_code: int | None = None
    first_step: int | None = None
    last_step: int | None = None
    elapsed_s: float | None = None
    resubmission: str | None = None
    crash: str | None = None
    nodes: tuple[str, ...] | None = None
    reason: str | None = None
    retry: str | None = None
    resume_step: int | None = None
    compile_cache_seeded_from: str | None = None
    checkpoint_set_aside: str | None = None
    timings: Mapping[str, float] | None = None
    null_keys: frozenset[str] = _nulls()

    @property
    def is_open(self) -> bool:
        """Whether the attempt was never closed (no ``end``)."""
        return not self.end

    @classmethod
    def opened(cls, number: int, start: str) -> Attempt:
        """A new attempt as the driver opens it: ``end`` and ``ended_by`` written as null."""
        return cls(number, start, null_keys=frozenset({"end", "ended_by"}))

    @classmethod
    def from_json(cls, data: Any, source: Path | str = STATUS, where: str = "attempts[-1].") -> Attempt:
        f = _fields(data, _ATTEMPT, source, where)
        if f["nodes"] is not None:
            f["nodes"] = tuple(f["nodes"])
        return cls(**f, null_keys=_null_keys(data))


@dataclasses.dataclass(frozen=True)
class PointStatus(_Record):
    """The whole ``status.json``: the point's state, its last transition and every attempt (see
    the module's format)."""

    state: str
    reason: str | None = None
    exit_code: int | None = None
    target_step: int | None = None
    last_step: int | None = None
    slurm: SlurmAllocation | None = None
    resubmission: str | None = None
    rehearsal: bool | None = None
    halving: HalvingMark | None = None
    attempts: tuple[Attempt, ...] = ()
    updated: str | None = None
    null_keys: frozenset[str] = _nulls()

    @property
    def last_attempt(self) -> Attempt | None:
        """The current (last) attempt, None before the first."""
        return self.attempts[-1] if self.attempts else None

    @property
    def point_state(self) -> PointState | str:
        """``state`` as :class:`PointState` (a word the enum does not know, from an older kit, as it is)."""
        return PointState(self.state) if self.state in PointState._value2member_map_ else self.state

    @property
    def job_id(self) -> str | None:
        """The display id of the job run that wrote the file (``123_4`` in an array), None outside Slurm."""
        return self.slurm.display_id if self.slurm is not None else None

    def with_last_attempt(self, attempt: Attempt) -> PointStatus:
        """This record with its last attempt replaced by ``attempt``."""
        return dataclasses.replace(self, attempts=(*self.attempts[:-1], attempt))

    @classmethod
    def from_json(cls, data: Any, source: Path | str = STATUS) -> PointStatus:
        """The record of a parsed ``status.json``; ``source`` names the file in errors.

        Raises:
            StatusFileError: not an object with a ``state``, an unknown or missing key, or a value
                of the wrong type (one line naming the file and the key).
        """
        if not isinstance(data, dict) or "state" not in data:
            raise StatusFileError(
                f"{source}: expected the driver's object with a 'state', got "
                f"{sorted(data) if isinstance(data, dict) else type(data).__name__}; move it aside"
            )
        f = _fields(data, _TOP, source, "")
        if f["slurm"] is not None:
            f["slurm"] = SlurmAllocation.from_json(f["slurm"], source)
        if f["halving"] is not None:
            f["halving"] = HalvingMark(**_fields(f["halving"], _HALVING, source, "halving."))
        f["attempts"] = tuple(
            Attempt.from_json(a, source, f"attempts[{i}].") for i, a in enumerate(f["attempts"] or [])
        )
        return cls(**f, null_keys=_null_keys(data) - {"attempts"})


# -- reading: each key, whether it must be there, and what its value must be ------------------------------
def _timings(v: Any) -> bool:
    return isinstance(v, dict) and all(is_str(k) and is_number(x) for k, x in v.items())


#: key -> (required, check, what the value must be); an optional key may also be null
_TOP: Spec = {
    "state": (True, is_str, "a state word (docs/run-folder.md)"),
    "reason": (False, is_str, "a text"),
    "exit_code": (False, is_int, "an exit code"),
    "target_step": (False, is_int, "a step"),
    "last_step": (False, is_int, "a step"),
    "slurm": (False, is_dict, "the job's {job_id, array_job_id, ...}"),
    "resubmission": (False, is_str, "a resubmit.json token"),
    "rehearsal": (False, lambda v: isinstance(v, bool), "true or false"),
    "halving": (False, is_dict, "{stage, rung, rank}"),
    "attempts": (False, lambda v: isinstance(v, list), "a list of attempts"),
    "updated": (False, is_str, "an ISO time"),
}
_SLURM: Spec = {
    "job_id": (False, is_str, "a Slurm id"),
    "array_job_id": (False, is_str, "a Slurm array id"),
    "array_task_id": (False, is_int, "a task index"),
    "restart_count": (False, is_int, "Slurm's restart count"),
    "nodelist": (False, is_str, "a Slurm node list"),
    "partition": (False, is_str, "a partition name"),
    "gpus": (False, is_int, "a GPU count"),
}
_HALVING: Spec = {
    "stage": (True, is_int, "a stage index"),
    "rung": (True, is_int, "a step"),
    "rank": (True, is_int, "a rank (1 = best)"),
}
_ATTEMPT: Spec = {
    "attempt": (True, is_int, "the attempt's number"),
    "start": (True, is_str, "an ISO time"),
    "end": (False, is_str, "an ISO time"),
    "ended_by": (False, is_str, "an ended_by word (docs/run-folder.md)"),
    "slurm_state": (False, is_str, "a Slurm state"),
    "exit_code": (False, is_int, "an exit code"),
    "first_step": (False, is_int, "a step"),
    "last_step": (False, is_int, "a step"),
    "elapsed_s": (False, is_number, "seconds"),
    "resubmission": (False, is_str, "a resubmit.json token"),
    "crash": (False, is_str, "a crash kind"),
    "nodes": (False, list_of(is_str), "a list of node names"),
    "reason": (False, is_str, "a text"),
    "retry": (False, is_str, "the retry decision"),
    "resume_step": (False, is_int, "a step"),
    "compile_cache_seeded_from": (False, is_str, "a folder"),
    "checkpoint_set_aside": (False, is_str, "a text"),
    "timings": (False, _timings, "{phase: seconds}"),
}


def _fields(data: Any, spec: Spec, source: Path | str, where: str) -> dict[str, Any]:
    """``data``'s values by ``spec`` (an optional key that is absent or null: None), or the error naming the key."""
    return checked_fields(data, spec, source, where, error=StatusFileError, writer=_WRITER, optional_may_be_null=True)


def _null_keys(data: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(k for k, v in data.items() if v is None)


# -- the file ------------------------------------------------------------------------------------
def pending_status() -> PointStatus:
    """What a run folder without ``status.json`` stands for: ``{"state": "pending", "attempts": []}``."""
    return PointStatus(state=PointState.PENDING.value)


def read_status(run_dir: Path | str, *, pending_if_missing: bool = True) -> PointStatus | None:
    """The record of ``<run_dir>/status.json``.

    When the job has not written one yet: :func:`pending_status` (``pending_if_missing``, the
    default), else None (the reports tell a point never started from one that recorded ``pending``).

    Raises:
        StatusFileError: the file exists but cannot be read, is not JSON, is not an object with a
            ``state``, or holds a key this module does not know or a value of the wrong type. The
            driver replaces the file atomically, so this is damage (or another kit's file), not a race.
    """
    path = Path(run_dir) / STATUS
    try:
        text = path.read_text()
    except FileNotFoundError:
        return pending_status() if pending_if_missing else None
    except OSError as exc:
        raise StatusFileError(f"{path}: cannot be read ({exc}); check the folder's permissions") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StatusFileError(
            f"{path}: not JSON ({exc}); the job's driver writes it atomically, so it was changed by hand or "
            "damaged: move it aside (the next start of the job writes a new one)"
        ) from exc
    return PointStatus.from_json(data, path)


#: Files :func:`read_status_or_none` has warned about in this process (a poll warns once per file).
_warned: set[Path] = set()


def read_status_or_none(run_dir: Path | str) -> PointStatus | None:
    """:func:`read_status` for a reader of many points: None when the file is missing or refused.

    A refused file (:class:`StatusFileError`: damage, or another kit version's file) is logged
    once per process as a warning that names the file, the key and the fix, and the reader goes
    on with the other points (a report shows the point without it, a wait follows its job in
    Slurm, the halving controller does not rank it).
    """
    try:
        return read_status(run_dir, pending_if_missing=False)
    except StatusFileError as exc:
        path = Path(run_dir) / STATUS
        if path not in _warned:
            _warned.add(path)
            logging.getLogger(__name__).warning("%s; going on without it", exc)
        return None


def write_status(run_dir: Path | str, status: PointStatus, *, exclusive: bool = False) -> Path:
    """Write ``<run_dir>/status.json`` atomically (:func:`grpokit.run_folder.atomic.write_json_atomic`);
    ``exclusive``: only where none exists (FileExistsError otherwise; the file is left as it is)."""
    path = Path(run_dir) / STATUS
    write_json_atomic(path, status.to_json(), exclusive=exclusive)
    return path


# -- times -----------------------------------------------------------------------------------------
def parse_time(text: str | None) -> dt.datetime | None:
    """ISO 8601 to an aware datetime (naive values are taken as UTC); None for blanks or junk."""
    if not text:
        return None
    try:
        t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def attempt_elapsed_s(attempt: Attempt, now: dt.datetime | None = None) -> float | None:
    """An attempt's elapsed seconds: its ``elapsed_s``, else end - start, else now - start (running)."""
    if attempt.elapsed_s is not None:
        return float(attempt.elapsed_s)
    start = parse_time(attempt.start)
    if start is None:
        return None
    end = parse_time(attempt.end) or now or dt.datetime.now(dt.UTC)
    return max(0.0, (end - start).total_seconds())
