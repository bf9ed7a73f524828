"""``resume=true``: the same sweep again, into its own folder, only where it is not finished.

A resume is refused when anything that decides what is trained differs from what the sweep folder
recorded: the point set (matched by index) and, per point, verl's overrides and the kit's
``experiment``, ``model``, ``hardware`` and ``sidecars`` sections (from ``<run>/point.json``).
``cluster.*`` and ``runtime.*`` (partition, time limit, requeue budget, ...) may change: they
decide where and how long a point runs, not what it learns. The points in a state ``grpokit
resubmit`` takes (:data:`grpokit.run_folder.point_state.RESUBMITTABLE_STATES`) and those never
submitted are resubmitted into their run folders and resume from their last checkpoint; the others
(completed, pruned, queued, running, unknown) are left alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpokit.config.point import PointSpec
from grpokit.run_folder.layout import MANIFEST, RunFolder
from grpokit.run_folder.manifest import ManifestPoint, SweepManifest
from grpokit.validate import Problem

#: PointSpec sections a resume must leave unchanged (besides ``verl_overrides``).
COMPARED_SECTIONS = ("experiment", "model", "hardware", "sidecars")
#: Top-level kit keys (and config groups) whose overrides a resume does not compare: they name the
#: command, the folders or where and how the points run, not the training (not the sweep command's
#: one-value-per-command keys, grpokit.submit.stages._COMMAND_KEYS).
NOT_COMPARED_KEYS = ("sweep_name", "resume", "dry_run", "wait", "logs_root", "hydra", "cluster", "runtime")

#: verl keys the kit derives from the sweep's and the point's names (grpokit.config.point): they follow
#: the compared settings, so a resume compares them only where the user typed them (``verl.<key>=``).
DERIVED_KEYS = ("trainer.default_local_dir", "trainer.project_name", "trainer.experiment_name")

_UNSET = "(not set)"


def _flat(node: Any, prefix: str) -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}.{k}"))
        return out
    return {prefix: node}


def _verl_settings(overrides: list[str]) -> dict[str, str]:
    out = {}
    for item in overrides:
        key, _, value = item.lstrip("+").partition("=")
        out[f"verl.{key}"] = value
    return out


def settings(spec: dict[str, Any], keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``{dotted key: value}`` of what a point trains with (a PointSpec as a dict, from point.json).

    The kit's name-derived keys (:data:`DERIVED_KEYS`) are left out unless in ``keep`` (typed by
    the user on either side of a comparison)."""
    out: dict[str, Any] = {
        k: v
        for k, v in _verl_settings(spec.get("verl_overrides") or []).items()
        if k[len("verl.") :] not in DERIVED_KEYS or k[len("verl.") :] in keep
    }
    for section in COMPARED_SECTIONS:
        out.update(_flat(spec.get(section) or {}, section))
    return out


def _kit_settings(overrides: list[str]) -> dict[str, str]:
    """Command-line overrides as ``{key: value}``, without those that only name the command."""
    out = {}
    for item in overrides:
        key, _, value = item.lstrip("+~").partition("=")
        if key.split(".", 1)[0].split("/", 1)[0] not in NOT_COMPARED_KEYS:
            out[key] = value
    return out


def _default_text(key: str) -> str:
    """What an unset verl key means: verl's default value, named as such."""
    if not key.startswith("verl."):
        return _UNSET
    from grpokit.config.overrides import flat_base, format_value

    base = flat_base()
    k = key[len("verl.") :]
    if k not in base:
        return _UNSET
    value = base[k]
    if isinstance(value, str) and "${" in value:
        return "verl's default"
    return f"{format_value(value)} (verl's default)"


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def differences(
    old: dict[str, Any], new: dict[str, Any], unset=_default_text, unset_new=None
) -> list[tuple[str, str, str]]:
    """``(key, old, new)`` for every key whose value differs (a key only one side has differs),
    sorted by key; ``unset(key)`` names the value of a key the old side does not have (default:
    verl's default value), ``unset_new(key)`` the new side's (default: ``unset``)."""
    unset_new = unset_new or unset
    out = []
    for key in sorted(set(old) | set(new)):
        a = _show(old[key]) if key in old else None
        b = _show(new[key]) if key in new else None
        if a != b:
            out.append((key, unset(key) if a is None else a, unset_new(key) if b is None else b))
    return out


def _typed_or_default(typed: dict[str, str]):
    """``unset`` for one side: a verl key that side typed shows its typed value (the kit leaves a value
    equal to verl's default out of ``verl_overrides``); an untyped one verl's default, named as such."""

    def label(key: str) -> str:
        short = key[len("verl.") :] if key.startswith("verl.") else None
        return typed[short] if short in typed else _default_text(key)

    return label


def recorded_spec(entry: ManifestPoint) -> dict[str, Any] | None:
    """The point.json a manifest entry's run folder holds (None when the job never wrote one)."""
    path = RunFolder(entry.run_dir).point
    return json.loads(path.read_text()) if path.exists() else None


def check_same_settings(manifest: SweepManifest, specs: list[PointSpec]) -> list[Problem]:
    """Every way this command's points differ from the recorded ones ([] when identical)."""
    from grpokit.config.explicit import typed_verl_keys

    recorded = {e.index: e for e in manifest.points}
    new = {s.index: s for s in specs}
    fix = "resume with the recorded settings, or start a new sweep with another sweep_name="
    problems = []
    for index in sorted(set(recorded) | set(new)):
        entry, spec = recorded.get(index), new.get(index)
        if spec is None:
            problems.append(Problem(entry.name, "point", "recorded in the sweep but not made by this command", fix))
            continue
        if entry is None:
            msg = f"not in the recorded sweep (it has {len(recorded)} point(s))"
            problems.append(Problem(spec.name, "point", msg, fix))
            continue
        old_spec = recorded_spec(entry)
        if old_spec is not None:
            new_spec = json.loads(spec.to_json())
            typed_old = typed_verl_keys(old_spec.get("kit_overrides") or [])
            typed_new = typed_verl_keys(new_spec.get("kit_overrides") or [])
            keep = frozenset(typed_old) | frozenset(typed_new)  # a typed name is compared with the other side's
            diffs = differences(
                settings(old_spec, keep),
                settings(new_spec, keep),
                unset=_typed_or_default(typed_old),
                unset_new=_typed_or_default(typed_new),
            )
            where = "its point.json"
        else:  # never started: only the manifest's command-line overrides are known
            diffs = differences(
                _kit_settings(entry.overrides),
                _kit_settings(spec.kit_overrides),
                unset=lambda _key: "(not on the command line)",
            )
            where = MANIFEST
        for key, a, b in diffs:
            problems.append(Problem(entry.name, key, f"{a} -> {b} (recorded in {where} -> this command)", fix))
    return problems


def point_states(sweep_dir: Path) -> dict[int, str]:
    """``{index: status word}`` of every recorded point (Slurm's live view, then status.json)."""
    from grpokit.run_folder.point_state import point_state
    from grpokit.run_folder.sweep_reader import load_sweep
    from grpokit.slurm.job_states import job_states

    sweep = load_sweep(sweep_dir)
    ids = [p.job_id for p in sweep.points if p.job_id]
    slurm_view = job_states(ids) if ids else {}
    return {p.index: point_state(p, slurm_view.get(p.job_id) if p.job_id else None) for p in sweep.points}


def to_resubmit(states: dict[int, str]) -> dict[int, str]:
    """The points a resume submits: ``{index: state}`` of those in
    :data:`~grpokit.run_folder.point_state.RESUBMITTABLE_STATES` (what ``grpokit resubmit`` takes) or
    ``not submitted`` (points of the sweep no job was submitted for)."""
    from grpokit.run_folder.point_state import RESUBMITTABLE_STATES

    return {i: s for i, s in states.items() if s in RESUBMITTABLE_STATES or s == "not submitted"}
