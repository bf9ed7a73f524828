"""The length task's reward: 1 for an empty response, falling linearly to 0 at ``max_chars``.

Formula::

    chars = len(solution_str)                       # the decoded response, special tokens skipped
    score = 1 - min(chars, max_chars) / max_chars   # in [0, 1]

``solution_str`` is what verl's reward loop decodes from the response's valid tokens with
``skip_special_tokens=True`` (verl 0.9.1, ``experimental/reward_loop/reward_manager/naive.py``): the
end-of-sequence token counts nothing, so ending early is what scores. ``max_chars`` comes from
``reward.custom_reward_function.reward_kwargs.max_chars``: ``experiment=length_grpo`` sets it to 4
characters per response token, below the ~4.8 of the tiny model's tokens, so that a response that
runs to the token limit scores about 0 and only ending early scores.
"""

from __future__ import annotations

from typing import Any

DEFAULT_MAX_CHARS = 512


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: Any = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one rollout; verl's custom reward function signature.

    Args:
        data_source, ground_truth, extra_info: the row's fields (unused: only the length counts).
        solution_str: the decoded response.
        max_chars: the length (characters) that scores 0; longer responses score 0 too.

    Returns:
        ``{"score": float in [0, 1], "chars": float}``; verl logs both (``chars`` as
        ``val-aux/<data_source>/chars/mean@N`` in validation).

    Raises:
        ValueError: ``max_chars`` not a positive integer (reward_kwargs.max_chars).
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
        raise ValueError(f"reward_kwargs.max_chars={max_chars!r} must be a positive integer (characters)")
    chars = len(solution_str)
    return {"score": 1.0 - min(chars, max_chars) / max_chars, "chars": float(chars)}
