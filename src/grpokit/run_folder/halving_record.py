"""``<sweep>/halving.json``: successive halving's plan and every stage's decision, as typed records.

Written by the sweep command (:func:`grpokit.submit.halving_controller.start`) and by each
controller job (:func:`grpokit.submit.halving_controller.advance`); read by them, by ``cancel``
(the pending controllers) and by ``status``/``report`` (the final target). Format (JSON object)::

    {"rungs": [int], "keep": float, "metric": str, "mode": "max" | "min", "final_target": int,
     "stage": int (the stage being trained),
     "stages": [{"stage": int, "target": int, "points": [name], "job_ids": [str | null],
                 "controller": str | null, "controller_restart": str | null,
                 "ranked": [{"name": str, "value": float | null, "rank": int}], "kept": [name],
                 "pruned": [name], "out": {name: state}, "metric_key": str, "decided": iso8601,
                 "resubmitting": iso8601, "controller_submitting": iso8601}]}

A stage's keys from ``ranked`` on are absent until the step that writes them (``ranked`` ...
``decided``: the controller's decision; ``resubmitting`` / ``controller_submitting``: a submission
begun, so that a restarted controller never submits twice). A key this module does not know, a
missing required key or a value of the wrong type is a :class:`HalvingRecordError` naming the file
and the key; nothing is guessed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpokit.run_folder.atomic import write_json_atomic
from grpokit.run_folder.json_record import Spec, checked_fields, is_int, is_number, is_str, list_of, optional
from grpokit.run_folder.layout import HALVING


class HalvingRecordError(ValueError):
    """``halving.json`` cannot be read as a halving record; ``str()`` is one line naming the file and key."""


@dataclasses.dataclass(frozen=True)
class HalvingPlan:
    """``halving.*`` of the sweep command. rungs: steps (increasing); keep: fraction in (0, 1);
    metric: a verl metric key or ``val_acc``; mode: ``max`` (higher is better) or ``min``;
    final_target: the points' ``trainer.total_training_steps`` (steps), the last stage's target."""

    rungs: tuple[int, ...]
    keep: float
    metric: str
    mode: str
    final_target: int

    def target(self, stage: int) -> int:
        """Stage k trains to rung k; the stage after the last rung to the final target."""
        return self.rungs[stage] if stage < len(self.rungs) else self.final_target

    @property
    def last_stage(self) -> int:
        """The index of the stage that trains to the final target (= the number of rungs)."""
        return len(self.rungs)


@dataclasses.dataclass(frozen=True)
class RankedPoint:
    """One point of a stage's ranking: rank 1 is the best; value None: the metric was not logged."""

    name: str
    value: float | None
    rank: int


@dataclasses.dataclass(frozen=True)
class HalvingStage:
    """One stage: the points trained to ``target`` (steps), their jobs, and what the controller did."""

    stage: int
    target: int
    points: tuple[str, ...]
    job_ids: tuple[str | None, ...]
    controller: str | None = None
    controller_restart: str | None = None
    ranked: tuple[RankedPoint, ...] | None = None
    kept: tuple[str, ...] | None = None
    pruned: tuple[str, ...] | None = None
    out: Mapping[str, str] | None = None
    metric_key: str | None = None
    decided: str | None = None
    resubmitting: str | None = None
    controller_submitting: str | None = None

    @property
    def is_decided(self) -> bool:
        """Whether the controller ranked this stage (its decision is recorded)."""
        return self.kept is not None

    def to_json(self) -> dict[str, Any]:
        """The stage's JSON object (the module's format; the steps not yet taken are left out)."""
        out: dict[str, Any] = {
            "stage": self.stage,
            "target": self.target,
            "points": list(self.points),
            "job_ids": list(self.job_ids),
            "controller": self.controller,
            "controller_restart": self.controller_restart,
        }
        if self.ranked is not None:
            out["ranked"] = [dataclasses.asdict(r) for r in self.ranked]
        for key in ("kept", "pruned"):
            if getattr(self, key) is not None:
                out[key] = list(getattr(self, key))
        for key in ("out", "metric_key", "decided", "resubmitting", "controller_submitting"):
            value = getattr(self, key)
            if value is not None:
                out[key] = dict(value) if key == "out" else value
        return out


@dataclasses.dataclass(frozen=True)
class HalvingRecord:
    """The whole ``halving.json``: the plan, the stage being trained and every stage so far."""

    plan: HalvingPlan
    stage: int
    stages: tuple[HalvingStage, ...]

    def with_stage(self, new: HalvingStage) -> HalvingRecord:
        """This record with stage ``new.stage`` replaced by ``new`` (or appended, when it is the next one)."""
        stages = list(self.stages)
        if new.stage == len(stages):
            stages.append(new)
        else:
            stages[new.stage] = new
        return dataclasses.replace(self, stages=tuple(stages))

    def pending_controllers(self) -> list[str]:
        """Job ids of the controllers of stages not decided yet, each stage's restart before its
        controller (``scancel`` of the controller alone would satisfy its restart's ``afternotok``)."""
        pending = [s for s in self.stages if s.controller and not s.is_decided]
        return [j for s in pending for j in (s.controller_restart, s.controller) if j]

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the module's format (a stage's absent steps are left out)."""
        plan = self.plan
        return {
            "rungs": list(plan.rungs),
            "keep": plan.keep,
            "metric": plan.metric,
            "mode": plan.mode,
            "final_target": plan.final_target,
            "stage": self.stage,
            "stages": [s.to_json() for s in self.stages],
        }

    @classmethod
    def from_json(cls, data: Any, source: Path | str = HALVING) -> HalvingRecord:
        """The record of a parsed ``halving.json``; ``source`` names the file in errors.

        Raises:
            HalvingRecordError: an unknown or missing key, or a value of the wrong type.
        """
        top = _fields(data, _TOP, source, "")
        plan = HalvingPlan(tuple(top["rungs"]), float(top["keep"]), top["metric"], top["mode"], top["final_target"])
        stages = []
        for i, raw in enumerate(top["stages"]):
            f = _fields(raw, _STAGE, source, f"stages[{i}].")
            for key in ("points", "job_ids", "kept", "pruned"):
                f[key] = tuple(f[key]) if f[key] is not None else None
            if f["ranked"] is not None:
                where = f"stages[{i}].ranked"
                f["ranked"] = tuple(
                    RankedPoint(**_fields(r, _RANKED, source, f"{where}[{j}].")) for j, r in enumerate(f["ranked"])
                )
            stages.append(HalvingStage(**f))
        return cls(plan, top["stage"], tuple(stages))


# -- reading: each key, whether it must be there, and what its value must be ------------------------------
#: key -> (required, check, what the value must be)
_TOP: Spec = {
    "rungs": (True, list_of(is_int), "a list of steps"),
    "keep": (True, is_number, "a fraction"),
    "metric": (True, is_str, "a metric key"),
    "mode": (True, lambda v: v in ("max", "min"), "max or min"),
    "final_target": (True, is_int, "a step"),
    "stage": (True, is_int, "a stage index"),
    "stages": (True, lambda v: isinstance(v, list), "a list of stages"),
}
_STAGE: Spec = {
    "stage": (True, is_int, "a stage index"),
    "target": (True, is_int, "a step"),
    "points": (True, list_of(is_str), "a list of point names"),
    "job_ids": (True, list_of(optional(is_str)), "a list of Slurm ids"),
    "controller": (False, optional(is_str), "a Slurm id or null"),
    "controller_restart": (False, optional(is_str), "a Slurm id or null"),
    "ranked": (False, lambda v: isinstance(v, list), "a list of {name, value, rank}"),
    "kept": (False, list_of(is_str), "a list of point names"),
    "pruned": (False, list_of(is_str), "a list of point names"),
    "out": (False, lambda v: isinstance(v, dict) and all(map(is_str, v.values())), "{name: state}"),
    "metric_key": (False, optional(is_str), "a metric key"),
    "decided": (False, optional(is_str), "an ISO time"),
    "resubmitting": (False, optional(is_str), "an ISO time"),
    "controller_submitting": (False, optional(is_str), "an ISO time"),
}
_RANKED: Spec = {
    "name": (True, is_str, "a point name"),
    "value": (True, optional(is_number), "a number or null"),
    "rank": (True, is_int, "a rank (1 = best)"),
}


def _fields(data: Any, spec: Spec, source: Path | str, where: str) -> dict[str, Any]:
    """``data``'s values by ``spec`` (an optional key that is absent or null: None), or the error naming the key."""
    out = checked_fields(
        data, spec, source, where, error=HalvingRecordError, writer="the halving controller", optional_may_be_null=True
    )
    if "value" in out and isinstance(out["value"], int):
        out["value"] = float(out["value"])
    return out


def read_halving(sweep_dir: Path | str) -> HalvingRecord | None:
    """The record of ``<sweep_dir>/halving.json``; None when the sweep has none (no ``halving.rungs``).

    Raises:
        HalvingRecordError: the file is not JSON or not a halving record (the message names it and the key).
    """
    path = Path(sweep_dir) / HALVING
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HalvingRecordError(f"{path}: not JSON ({exc}); it is written atomically, so it was damaged") from None
    return HalvingRecord.from_json(data, path)


def write_halving(sweep_dir: Path | str, record: HalvingRecord) -> Path:
    """Write ``<sweep_dir>/halving.json`` atomically (:func:`grpokit.run_folder.atomic.write_json_atomic`)."""
    path = Path(sweep_dir) / HALVING
    write_json_atomic(path, record.to_json())
    return path
