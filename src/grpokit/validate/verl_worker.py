"""verl's side of a sweep's validation, run by the job's Python: ``python -m grpokit.validate.verl_worker``.

When the job's environment has another verl than the sweep command's (another release, a fork's
editable checkout or one on ``PYTHONPATH``), :mod:`grpokit.validate.job_verl` runs this module
once for all the sweep's points in the job's interpreter, so that the points are composed from
that verl's Hydra config and checked by its ``validate_config``, its config dataclasses and its
registries (:mod:`grpokit.validate.verl_check`, :mod:`grpokit.validate.verl_registries`).

Input (stdin, JSON): ``{"points": [{"name", "verl_overrides", "kit_overrides"}, ...]}``.
Output (stdout, one JSON line): ``{"verl": [version, folder], "registries": {...},
"points": [{"config": <verl's composed config, unresolved, or null>,
"problems": [[point, key, message, fix], ...]}, ...]}``. Notes verl's checks print go to stderr.
Imports only the modules that compose and check (no Slurm, submission or runtime code).
"""

from __future__ import annotations

import dataclasses
import json
import sys


@dataclasses.dataclass(frozen=True)
class VerlPoint:
    """What verl's checks read of a point (:class:`grpokit.config.point.PointSpec`'s fields of the same names)."""

    name: str
    verl_overrides: list[str]
    kit_overrides: list[str]
    verl_entry: dict = dataclasses.field(default_factory=dict)  # {}: main_ppo with ppo_trainer


def for_this_verl(point: VerlPoint, base: dict) -> VerlPoint:
    """``point`` with its overrides fitted to this verl's defaults ``base`` (``{key: default}``).

    The sweep command wrote ``verl_overrides`` against its own verl's defaults: a key its verl lacks
    is added (``+key=...``), a value equal to its default is left out. Here a ``+key`` this verl has
    is set as a value, and a ``verl.<key>=<value>`` the user typed (``kit_overrides``) that was
    left out is set again, so this verl's own default (a fork's) does not replace the typed value.
    """
    overrides = [o[1:] if o.startswith("+") and o[1:].split("=", 1)[0] in base else o for o in point.verl_overrides]
    emitted = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    for typed in point.kit_overrides:
        key, _, value = typed.lstrip("+~").partition("=")
        key = key.removeprefix("verl.")
        if typed.lstrip("+~").startswith("verl.") and key in base and key not in emitted and "${" not in value:
            overrides.append(f"{key}={value}")
    return dataclasses.replace(point, verl_overrides=overrides)


def check_points(points: list[VerlPoint]) -> dict:
    """The answer for ``points`` (see the module), composed and checked by this interpreter's verl."""
    from omegaconf import OmegaConf

    from grpokit.config import resolvers
    from grpokit.config.overrides import flat_base
    from grpokit.config.verl_entry import Entry
    from grpokit.config.verl_schema import use
    from grpokit.validate import verl_check
    from grpokit.validate.job_environment import local_verl
    from grpokit.validate.verl_registries import registries

    resolvers.register()
    answers = []
    for given in points:
        use(Entry.of(given.verl_entry).ref)  # the config the point composes (Megatron's, a recipe's)
        point = for_this_verl(given, flat_base())
        cfg, problems = verl_check.compose_point(point)  # type: ignore[arg-type]  # the fields it reads
        problems += verl_check.check_added_keys(point)  # type: ignore[arg-type]
        if cfg is not None:
            problems += verl_check.run_validate_config(point, cfg)  # type: ignore[arg-type]
        config = OmegaConf.to_container(cfg, resolve=False) if cfg is not None else None
        answers.append({"config": config, "problems": [dataclasses.astuple(p) for p in problems]})
    return {
        "verl": list(local_verl()),
        "registries": registries(),
        "points": answers,
    }


def main() -> None:
    request = json.load(sys.stdin)
    points = [
        VerlPoint(p["name"], list(p["verl_overrides"]), list(p["kit_overrides"]), dict(p.get("verl_entry") or {}))
        for p in request["points"]
    ]
    answer = check_points(points)
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
