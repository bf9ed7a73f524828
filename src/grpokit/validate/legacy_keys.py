"""verl's legacy reward keys, which verl's ``main_ppo`` ignores, refused with the key verl reads.

``reward_model.reward_manager=dapo``, ``reward_model.enable=true``, ``reward_model.model.path=...``,
``reward_model.rollout.*``, ``custom_reward_function.*``, ``sandbox_fusion.*`` compose and pass
``validate_config``, but verl 0.9.1 translates them to ``reward.*`` only in its fully-async entry
point; the kit runs ``main_ppo``, so a DAPO, FAPO or reward-model script would train with the default
reward. The table is verl's own translation (:mod:`grpokit.config.verl_legacy`); a name the new key
looks up in verl's registries (``reward.reward_manager.name``) is checked there too, so
``reward_model.reward_manager=no_such`` names the registered managers.
"""

from __future__ import annotations

from grpokit.config import verl_legacy
from grpokit.config.overrides import flat_base
from grpokit.config.point import PointSpec
from grpokit.problems import Problem


def legacy_problem(point: str, key: str, value: str) -> Problem:
    """The refusal of legacy verl ``key`` (verl's name, no ``verl.``) set to ``value`` (as typed)."""
    from grpokit.config.verl_schema import _version
    from grpokit.validate.run_checks import unregistered

    new = verl_legacy.translate(key) or ""
    section = key.split(".", 1)[0]
    entry = verl_legacy.MIGRATION[2]
    if not new:
        message = f"verl {_version('verl')} reads it in no entry point (not even {entry}, which translates {section}.*)"
        return Problem(point, f"verl.{key}", message, f"drop verl.{key}")
    message = (
        f"verl's main_ppo ignores it: verl {_version('verl')} reads it as {new} only in its fully-async entry "
        f"point ({entry}), so the point would train without it"
    )
    found = unregistered(new, value)
    if found:
        return Problem(point, f"verl.{key}", f"{message}; as {new}: {found[0]}", found[1])
    base = flat_base()
    known = new in base or any(k.startswith(new + ".") for k in base)
    return Problem(point, f"verl.{key}", message, f"set {'' if known else '+'}verl.{new}={value} instead")


def check(spec: PointSpec) -> list[Problem]:
    """One problem per legacy key among the point's verl overrides (typed or from the kit's files); none
    for a recipe's own entry (``spec.verl_entry``), whose code reads its keys itself (DAPO's
    ``reward_model.overlong_buffer``)."""
    if (spec.verl_entry or {}).get("module", "verl.trainer.main_ppo") != "verl.trainer.main_ppo":
        return []
    problems = []
    for item in spec.verl_overrides:
        key, _, value = item.lstrip("+~").partition("=")
        if verl_legacy.legacy(key):
            problems.append(legacy_problem(spec.name, key, value))
    return problems
