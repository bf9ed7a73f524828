"""Validation of sweep points before submission (and again inside the job).

Order: verl's schema (composition), verl's ``validate_config``, then the kit's checks (files,
lengths, added keys, GPU plan). Every problem names the point, the key and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable, Iterator

from omegaconf import DictConfig

from grpokit.config.point import PointSpec
from grpokit.problems import Problem, SweepValidationError
from grpokit.validate import (
    data_steps,
    gpu_plan,
    job_environment,
    job_needs,
    job_verl,
    kit_checks,
    legacy_keys,
    model_checks,
    preset_algorithm,
    recipe_entry,
    run_checks,
    slurm_request,
    verl_check,
)

__all__ = [
    "Problem",
    "SweepValidationError",
    "check_each",
    "check_in_job_verl",
    "check_stream",
    "validate_point",
    "validate_points",
]


def validate_point(spec: PointSpec) -> tuple[DictConfig | None, list[Problem]]:
    """All checks for one point; returns verl's composed config (None if it did not compose)."""
    use_entry(spec)
    cfg, problems = verl_check.compose_point(spec)
    problems += verl_check.check_added_keys(spec)
    if cfg is None:
        return None, problems
    return cfg, problems + _composed_checks(spec, cfg)


def use_entry(spec: PointSpec) -> None:
    """Compose the point's own verl config in this process (``spec.verl_entry``: Megatron's, a recipe's)."""
    from grpokit.config.verl_entry import Entry
    from grpokit.config.verl_schema import use

    use(Entry.of(spec.verl_entry).ref)


def _composed_checks(spec: PointSpec, cfg: DictConfig, verl_side: bool = True) -> list[Problem]:
    """The checks that read verl's composed config of the point (they do not change it).
    ``verl_side=False``: verl's ``validate_config`` ran elsewhere (the job's verl, :func:`check_in_job_verl`)."""
    problems = legacy_keys.check(spec)
    problems += recipe_entry.check(spec, cfg)
    if verl_side:
        problems += verl_check.run_validate_config(spec, cfg)
    problems += kit_checks.check_files(spec, cfg)
    problems += kit_checks.check_lengths(spec, cfg)
    problems += kit_checks.check_fused_kernels(spec, cfg)
    problems += data_steps.check_data_steps(spec, cfg)
    problems += preset_algorithm.check(spec, cfg)
    model_key, model_fix = kit_checks.model_hint(spec, cfg)
    problems += model_checks.check_model(spec, cfg, model_fix, model_key)
    problems += kit_checks.check_cluster(spec)
    problems += kit_checks.check_runtime(spec)
    problems += gpu_plan.check(spec, cfg)
    problems += run_checks.check(spec, cfg)
    problems += job_needs.check(spec, cfg, job_environment.ask(job_environment.job_python(spec.cluster.python)))
    return problems


def validate_points(specs: list[PointSpec]) -> None:
    """Validate every point (each as :func:`validate_point` does, see :func:`check_stream`); raise
    one error listing all problems. The checks run in the forked validator when there is one
    (:mod:`grpokit.validate.overlap`), else here; here also when verl passed every point's config
    before (:mod:`grpokit.validate.verl_verdicts`): then verl is not imported at all. When the
    job's verl is not this command's (:mod:`grpokit.validate.job_verl`), verl's side runs in the
    job's Python (:func:`check_in_job_verl`).

    Raises:
        SweepValidationError: at least one point has a problem (nothing may be submitted).
    """
    from grpokit.validate import job_verl, overlap, verl_verdicts

    verl = job_verl.of(specs[0].cluster.python) if specs else None
    if verl is not None and verl.remote:  # the job's verl is not this command's: its checks run there
        overlap.stop()
        problems = check_in_job_verl(specs, verl)
    else:
        if all(verl_verdicts.passed(s) for s in specs):  # verl passed every config before: no need to import it
            overlap.stop()
        answer = overlap.take(specs)  # the same checks, run by the process that imported verl meanwhile
        if answer is None:
            problems = check_each(specs)
        else:
            problems, printed = answer
            sys.stderr.write(printed)
    problems += check_sweep(specs)
    if problems:
        raise SweepValidationError(problems)


def check_in_job_verl(specs: list[PointSpec], verl: job_verl.VerlTarget) -> list[Problem]:
    """Every point's problems when the job's verl is not this command's: verl's side (composition,
    ``validate_config``, its config dataclasses, its registries) in the job's Python
    (:func:`grpokit.validate.job_verl.validate`), the kit's checks here on the configs it composed."""
    from omegaconf import OmegaConf

    from grpokit.validate import verl_registries

    answer = job_verl.validate(verl, specs)
    verl_registries.use(answer.registries or None)
    problems: list[Problem] = []
    try:
        said = f"(the job's verl {verl.version} at {verl.folder})"
        for spec, (config, found) in zip(specs, answer.points, strict=True):
            problems += [dataclasses.replace(p, message=f"{p.message} {said}") for p in found]
            if config is not None:
                cfg = OmegaConf.create(config)
                OmegaConf.set_struct(cfg, True)  # as Hydra's compose gives it
                problems += _composed_checks(spec, cfg, verl_side=False)
    finally:
        verl_registries.use(None)
    return problems


def check_each(specs: list[PointSpec]) -> list[Problem]:
    """The problems of every point, each checked as :func:`validate_point` does (in the order of ``specs``)."""
    return [p for found in check_stream(specs) for p in found]


def check_stream(specs: Iterable[PointSpec]) -> Iterator[list[Problem]]:
    """The problems of each point as :func:`validate_point` finds them, one list per point, in order.

    ``specs`` may be a stream (points arriving while earlier ones are checked: the forked
    validator of :mod:`grpokit.validate.overlap`). The first point's verl config is composed from
    verl's defaults; a point that differs from it only in values is checked on that same config
    with its own values applied in place and the first point's put back after
    (:class:`grpokit.config.override_step.Workspace`): no copy of verl's complete config per point.
    A point whose values do not apply is composed on its own, so its problem reads as
    :func:`validate_point` words it. OmegaConf's interpolation parsing is memoised while the
    stream is consumed (:func:`grpokit.config.override_step.cached_interpolation_parsing`).
    """
    from grpokit.config.override_step import Workspace, cached_interpolation_parsing
    from grpokit.config.overrides import flat_base

    workspace: Workspace | None = None
    with cached_interpolation_parsing():  # every point resolves the same ${...} texts of verl's config
        for spec in specs:
            use_entry(spec)  # a sweep composes one config (one script); the workspace is that config's
            delta = workspace.delta(spec.verl_overrides) if workspace is not None else None
            if delta is None:
                cfg, found = validate_point(spec)
                if workspace is None and cfg is not None:
                    # its checks are done: the workspace may own it; verl's raw defaults for keys a point leaves out
                    workspace = Workspace(cfg, spec.verl_overrides, defaults=flat_base())
                yield found
                continue
            try:
                applied = workspace.point(delta)
                cfg = applied.__enter__()
            except Exception:  # a value that does not fit its key: composed alone, for verl_check's wording
                found = validate_point(spec)[1]
            else:
                try:
                    found = verl_check.check_added_keys(spec) + _composed_checks(spec, cfg)
                finally:
                    applied.__exit__(None, None, None)
            yield found


def check_hardware_requests(requests: list[list[PointSpec]]) -> list[Problem]:
    """One problem per Slurm request (a group of points that go out alike) holding points of
    several hardware profiles: nothing sends each profile's points to the GPUs it was sized for."""
    problems = []
    for group in requests:
        profiles = sorted({str(s.hardware.get("name")) for s in group if s.hardware.get("name")})
        if group[0].cluster.kind == "slurm" and len(profiles) > 1:
            problems.append(
                Problem(
                    ", ".join(s.name for s in group[:6]) + (" ..." if len(group) > 6 else ""),
                    "hardware",
                    f"points sized for different GPUs ({', '.join(profiles)}) would share one Slurm request: "
                    "any of them may land on the other's GPUs",
                    "map each profile to its nodes' features: "
                    + " ".join(f"cluster.gpu_constraints.{p}=<features>" for p in profiles)
                    + " (or sweep one hardware profile per command)",
                )
            )
    return problems


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
        requests.setdefault(json.dumps(dataclasses.asdict(spec.cluster), sort_keys=True, default=str), []).append(spec)
    problems += check_hardware_requests(list(requests.values()))
    if specs:
        env = job_environment.ask(job_environment.job_python(specs[0].cluster.python))
        problems += job_needs.check_verl(env, str(specs[0].experiment.get("name") or ""))
    for group in requests.values():
        found = slurm_request.check_request(group[0].cluster, name=group[0].sweep_name, num_points=len(group))
        if len(requests) > 1:
            names = ", ".join(s.name for s in group[:6]) + (" ..." if len(group) > 6 else "")
            found = [dataclasses.replace(p, point=names) for p in found]
        problems += found
    return problems
