"""Validation of sweep points before submission (and again inside the job).

Order: verl's schema (composition), verl's ``validate_config``, then the kit's checks (files,
lengths, added keys, GPU plan). Every problem names the point, the key and the fix.
"""

from __future__ import annotations

from omegaconf import DictConfig

from grpokit.config.point import PointSpec
from grpokit.validate import gpu_plan, kit_checks, verl_check
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
    problems += kit_checks.check_cluster(spec)
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
    if problems:
        raise SweepValidationError(problems)
    return cfgs
