"""Validation of sweep points before submission (and again inside the job).

Order: verl's schema (composition), verl's ``validate_config``, then the kit's checks (files,
lengths, added keys, GPU plan). Every problem names the point, the key and the fix.
"""

from __future__ import annotations

import dataclasses
import json

from omegaconf import DictConfig

from grpokit.config.point import PointSpec
from grpokit.validate import gpu_plan, kit_checks, model_checks, slurm_request, verl_check
from grpokit.validate.problems import Problem, SweepValidationError

__all__ = ["Problem", "SweepValidationError", "validate_point", "validate_points"]


def validate_point(spec: PointSpec) -> tuple[DictConfig | None, list[Problem]]:
    """All checks for one point; returns verl's composed config (None if it did not compose)."""
    cfg, problems = verl_check.compose_point(spec)
    problems += verl_check.check_added_keys(spec)
    if cfg is None:
        return None, problems
    problems += verl_check.run_validate_config(spec, cfg)
    problems += kit_checks.check_files(spec, cfg)
    problems += kit_checks.check_lengths(spec, cfg)
    problems += model_checks.check_model(spec, cfg, kit_checks.download_hint(spec))
    problems += kit_checks.check_cluster(spec)
    problems += kit_checks.check_runtime(spec)
    problems += gpu_plan.check(spec, cfg)
    return cfg, problems


def validate_points(specs: list[PointSpec]) -> list[DictConfig]:
    """Validate every point; raise one error listing all problems of all points.

    Raises:
        SweepValidationError: at least one point has a problem (nothing may be submitted).
    """
    problems: list[Problem] = []
    cfgs = []
    for spec in specs:
        cfg, found = validate_point(spec)
        problems += found
        cfgs.append(cfg)
    problems += check_sweep(specs)
    if problems:
        raise SweepValidationError(problems)
    return cfgs


def check_sweep(specs: list[PointSpec]) -> list[Problem]:
    """What no single point shows: shared checkpoint folders, and the Slurm request of each array."""
    problems: list[Problem] = []
    owners: dict[str, list[str]] = {}
    for spec in specs:
        owners.setdefault(spec.checkpoint_dir, []).append(spec.name)
    for folder, names in owners.items():
        if len(names) > 1:
            problems.append(
                Problem(
                    ", ".join(names),
                    "verl.trainer.default_local_dir",
                    f"{len(names)} points would write their checkpoints to one folder {folder}",
                    "drop verl.trainer.default_local_dir (each point gets its own folder) or set checkpoint_root=",
                )
            )
    requests: dict[str, list[PointSpec]] = {}
    for spec in specs:
        requests.setdefault(json.dumps(spec.cluster, sort_keys=True, default=str), []).append(spec)
    for group in requests.values():
        found = slurm_request.check_request(group[0].cluster, name=group[0].sweep_name, num_points=len(group))
        if len(requests) > 1:
            names = ", ".join(s.name for s in group[:6]) + (" ..." if len(group) > 6 else "")
            found = [dataclasses.replace(p, point=names) for p in found]
        problems += found
    return problems
