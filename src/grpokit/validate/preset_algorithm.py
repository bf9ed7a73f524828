"""A typed key the experiment preset's algorithm ignores, refused with the reason.

The experiment presets train GRPO (``algorithm.adv_estimator: grpo``, ``experiment/_grpo.yaml``).
A PPO-style override set (``critic.*`` keys, no ``algorithm.adv_estimator``) composes, passes
``validate_config`` and runs as GRPO with the preset's group size and KL loss: verl builds no
critic unless ``need_critic`` says so (``critic.enable``, else ``adv_estimator == gae``;
``verl/trainer/ppo/utils.py``), so every ``critic.*`` key does nothing. Here it is one line naming
the key and the fix. A user who typed ``algorithm.adv_estimator`` or ``critic.enable`` chose the
algorithm: nothing is said (verl's own warning stands).
"""

from __future__ import annotations

import contextlib
import io
import warnings

from omegaconf import DictConfig

from grpokit.config.explicit import typed_verl_keys
from grpokit.config.point import PointSpec
from grpokit.problems import Problem

ESTIMATOR, ENABLE = "algorithm.adv_estimator", "critic.enable"
#: verl's advantage estimator that trains a critic (``AdvantageEstimator.GAE``).
GAE = "gae"


def check(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """One problem when the point's typed ``critic.*`` keys do nothing under the preset's estimator.

    verl's ``need_critic`` is asked (imports verl; only when a ``critic.*`` key was typed).
    """
    typed = typed_verl_keys(spec.kit_overrides)
    critic = [k for k in typed if k.startswith("critic.")]
    if not critic or ESTIMATOR in typed or ENABLE in typed:
        return []
    from grpokit.config.verl_schema import lean_imports

    lean_imports()
    from verl.trainer.ppo.utils import need_critic

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")  # "Disabled critic as algorithm.adv_estimator != gae"
        if need_critic(cfg):
            return []
    estimator = cfg.algorithm.adv_estimator
    others = f" (and {', '.join(critic[1:4])}{' ...' if len(critic) > 4 else ''})" if len(critic) > 1 else ""
    return [
        Problem(
            spec.name,
            f"verl.{critic[0]}",
            f"ignored{others}: the experiment preset {spec.experiment.get('name', '')} sets "
            f"{ESTIMATOR}={estimator} (not typed), which trains no critic (verl's need_critic)",
            f"set verl.{ESTIMATOR}={GAE} to train a critic, or drop the critic.* keys",
        )
    ]
