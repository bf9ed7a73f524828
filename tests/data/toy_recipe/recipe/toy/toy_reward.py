"""The toy recipe's reward: verl's, multiplied by ``toy.reward_scale``.

It imports ``compute_reward`` from ``verl.trainer.ppo.reward`` on purpose: verl 0.9.1 has that module
but not that name, so the kit's import check refuses this recipe on verl 0.9.1 (a recipe written for
another verl), naming this file and line.
"""

from verl.trainer.ppo.reward import compute_reward

_scale = 1.0


def use_reward_scale(scale: float) -> None:
    """Set the factor :func:`scaled_reward` applies (``toy.reward_scale``)."""
    global _scale
    _scale = float(scale)


def scaled_reward(data, reward_fn):
    """``(reward tensor, extra info)`` of verl's ``compute_reward``, the tensor times the set scale."""
    reward_tensor, extra = compute_reward(data, reward_fn)
    return reward_tensor * _scale, extra
